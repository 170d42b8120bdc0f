"""Multi-node runs through ``gpumon launch ddp --hosts``: real torchrun nodes, each "host" on this machine.

Hosts are reached through tests/ssh_standin.py, a stand-in for ssh that runs the
remote command here in a state dir of the host's own; the rendezvous is on
127.0.0.1 (--rdzv-host), as a cluster whose ssh names differ from its training
network's addresses would give it. test_multinode_ssh.py does the same through
a real sshd.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import needs_installed, wait_ended, wait_until

pytest.importorskip("torch")
needs_installed("sklearn")  # the trainers import it, not this process

STANDIN = Path(__file__).resolve().parent / "ssh_standin.py"
FAIL_ON_RANK_1 = """\
import os, time
import torch
import torch.distributed as dist
from gpumon import telemetry

dist.init_process_group("gloo")
for step in range(1, 10_000):
    t = torch.ones(4)
    dist.all_reduce(t)
    telemetry.log(step=step, loss=1.0 / step)
    if dist.get_rank() == 1 and step == 5:
        raise RuntimeError("node rank 1 broke on purpose")
    time.sleep(0.05)
"""


class Fleet:
    """The launching machine (its own state dir) and the stand-in hosts under one temporary folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {
            **os.environ,
            "GPUMON_HOME": str(root / "launcher"),
            "GPUMON_CONFIG_DIR": str(root / "config"),
            "STANDIN_ROOT": str(root / "hosts"),
            "CUDA_VISIBLE_DEVICES": "",
        }
        self.env.pop("GPUMON_SSH", None)
        self.ssh = f"{sys.executable} {STANDIN}"

    def gpumon(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gpumon", *args]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, cwd=self.root, timeout=timeout)

    def launch(self, *args: str, program_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        options = ("--ssh", self.ssh, "--rdzv-host", "127.0.0.1")
        return self.gpumon("launch", *args, *options, *(("--", *program_args) if program_args else ()))

    def group(self) -> dict[str, Any]:
        done = self.gpumon("runs", "--json")
        assert done.returncode == 0, done.stderr
        (group,) = json.loads(done.stdout)["groups"]
        return group

    def node_runs(self, host: str) -> list[dict[str, Any]]:
        env = {**self.env, "GPUMON_HOME": str(self.root / "hosts" / host / "state")}
        argv = [sys.executable, "-m", "gpumon", "runs", "--json"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        return json.loads(done.stdout)["runs"] if done.returncode == 0 else []

    def processes(self) -> list[psutil.Process]:
        """Every live process of any node: supervisors (their run dir) and torchrun and ranks (GPUMON_HOME)."""
        mine = str(self.root)
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                text = " ".join(proc.cmdline()) + " " + proc.environ().get("GPUMON_HOME", "")
            except psutil.Error:
                continue
            if mine in text and proc.pid != os.getpid():
                found.append(proc)
        return found


@pytest.fixture
def fleet(tmp_path: Path):
    fleet = Fleet(tmp_path)
    yield fleet
    for proc in fleet.processes():  # whatever a failing test left behind
        proc.kill()


def node_dirs(fleet: Fleet) -> list[Path]:
    """The run folder of each node of the launcher's group, node 0 first (host `local`: the launcher's own)."""
    from gpumon.core.nodes.group import load_all

    (group,) = load_all(fleet.root / "launcher")
    homes = {n.host: fleet.root / ("launcher" if n.host == "local" else f"hosts/{n.host}/state") for n in group.nodes}
    return [homes[n.host] / "runs" / n.run for n in sorted(group.nodes, key=lambda n: n.rank)]


def wait_nodes_ended(fleet: Fleet, timeout: float = 240.0) -> dict[str, Any]:
    """Until each node's supervisor wrote its end, read in its files; then the group as `gpumon runs` gives it.
    Polling `gpumon runs` instead asked each node through ssh every second: five Pythons a poll, taken from the
    run's own CPU time."""
    for run_dir in node_dirs(fleet):
        wait_ended(run_dir.parent.parent, run_dir.name, timeout=timeout)
    return fleet.group()


def wait_nodes_stepped(fleet: Fleet, steps: int, timeout: float = 180.0) -> dict[str, Any]:
    """Until each node's run reached ``steps`` (its supervisor's summary, read in its files); then the group."""
    from gpumon.core.runs.reading.telemetry import RunTelemetry

    folds = [RunTelemetry(run_dir) for run_dir in node_dirs(fleet)]

    def stepped() -> bool:
        for fold in folds:
            fold.update(events=False)  # the summary.json the node's own `gpumon runs` reads
        return all((fold.current_step or 0) >= steps for fold in folds)

    assert wait_until(stepped, timeout=timeout, step=0.5), [fold.current_step for fold in folds]
    return fleet.group()


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """A user's mistake: exit 2 and exactly one line on stderr."""
    assert done.returncode == 2, done
    (line,) = done.stderr.strip().splitlines()
    return line


def test_two_node_ddp_run_finishes_with_both_nodes_telemetry(fleet: Fleet) -> None:
    done = fleet.launch("ddp", "--hosts", "n0,n1", "--nproc", "1", program_args=("--epochs", "2"))
    assert done.returncode == 0, done.stderr
    group_id = done.stdout.split()[-1]
    assert group_id.startswith("g-ddp-")

    group = wait_nodes_ended(fleet)
    assert group["state"] == "finished", json.dumps(group, indent=1)
    assert group["root_cause"] is None
    assert [n["host"] for n in group["nodes"]] == ["n0", "n1"]
    for node in group["nodes"]:
        assert node["state"] == "finished" and node["exit_code"] == 0
        assert node["step"] and node["step"] >= 20 and node["loss"] is not None
    # Each node is an ordinary run on its own host, naming the group, its node rank and node 0's rendezvous.
    (run0,) = fleet.node_runs("n0")
    (run1,) = fleet.node_runs("n1")
    assert (run0["group"], run0["node_rank"], run0["nnodes"]) == (group_id, 0, 2)
    assert (run1["group"], run1["node_rank"]) == (group_id, 1)
    assert run0["rdzv_endpoint"] == run1["rdzv_endpoint"] == group["rdzv_endpoint"]
    assert group["rdzv_endpoint"].startswith("127.0.0.1:") and not group["rdzv_endpoint"].endswith(":0")
    assert (run0["step"], run1["step"]) == (group["nodes"][0]["step"], group["nodes"][1]["step"])
    # Global ranks 0 and 1 each logged on their own node.
    assert Path(run0["dir"], "logs", "rank0.log").is_file() and Path(run1["dir"], "logs", "rank1.log").is_file()

    table = fleet.gpumon("runs").stdout.splitlines()
    (line,) = [row for row in table if row.startswith(group_id)]
    assert "finished" in line and "n0 finished, n1 finished" in line
    assert not fleet.processes()


def test_stopping_the_group_mid_run_leaves_no_process_on_any_node(fleet: Fleet) -> None:
    done = fleet.launch("ddp", "--hosts", "n0,n1", "--nproc", "1", program_args=("--epochs", "500"))
    assert done.returncode == 0, done.stderr
    group_id = done.stdout.split()[-1]
    group = wait_nodes_stepped(fleet, 2)
    assert group["state"] == "running", json.dumps(group, indent=1)
    assert all(n["step"] >= 2 for n in group["nodes"]), json.dumps(group, indent=1)
    assert len(fleet.processes()) >= 6  # per node: its supervisor, torchrun and a rank

    stopped = fleet.gpumon("stop", group_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "node 0 (n0): stopped" in stopped.stdout and "node 1 (n1): " in stopped.stdout
    assert wait_until(lambda: not fleet.processes(), timeout=30), [p.cmdline() for p in fleet.processes()]
    group = fleet.group()
    assert group["state"] == "stopped"
    assert group["root_cause"].endswith("stopped by request")


def test_stopping_one_node_stops_its_whole_group(fleet: Fleet) -> None:
    done = fleet.launch("ddp", "--hosts", "n0,local", "--nproc", "1", program_args=("--epochs", "500"))
    assert done.returncode == 0, done.stderr
    group = wait_nodes_stepped(fleet, 1)
    assert all(n["step"] >= 1 for n in group["nodes"]), json.dumps(group, indent=1)
    local_run = group["nodes"][1]["run"]  # host `local` is this machine: the run is in the launcher's state dir
    stopped = fleet.gpumon("stop", local_run)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"{local_run} is node 1 of {group['id']}: stopping every node" in stopped.stdout
    assert wait_until(lambda: not fleet.processes(), timeout=30)
    assert fleet.group()["state"] == "stopped"


def test_a_failing_node_ends_the_group_naming_the_node_its_rank_and_error(fleet: Fleet) -> None:
    (fleet.root / "fail_rank1.py").write_text(FAIL_ON_RANK_1)
    done = fleet.launch("script", "fail_rank1.py", "--hosts", "n0,n1", "--nproc", "1")
    assert done.returncode == 0, done.stderr
    group = wait_nodes_ended(fleet, timeout=180)
    assert group["state"] == "failed", json.dumps(group, indent=1)
    # torchrun took node 0 down by itself: its rank lost its peer.
    n0, n1 = group["nodes"]
    assert n1["state"] == "failed" and "node rank 1 broke on purpose" in n1["error"]
    # Its words depend on where its rank was when the peer died (gloo's "Connection closed by peer" mostly).
    assert n0["state"] == "failed" and "broke on purpose" not in (n0["error"] or "")
    assert group["root_cause"] == "n1 (node 1, rank 1) failed: RuntimeError: node rank 1 broke on purpose"
    table = fleet.gpumon("runs").stdout
    assert f"{group['id']}: n1 (node 1, rank 1) failed: RuntimeError: node rank 1 broke on purpose" in table
    assert wait_until(lambda: not fleet.processes(), timeout=30)


def test_an_unreachable_host_starts_nothing_and_says_which_and_why(fleet: Fleet) -> None:
    fleet.env["STANDIN_DOWN"] = "gpu9"
    assert error_line(fleet.launch("ddp", "--hosts", "n0,gpu9", "--nproc", "1")) == (
        "gpumon: error: gpu9: host unreachable (ssh: connect to host gpu9 port 22: Connection refused); "
        "nothing was started"
    )
    assert not (fleet.root / "hosts" / "n0" / "state" / "runs").exists()
    assert not fleet.processes()


def test_a_node_that_fails_to_start_stops_the_nodes_already_started(fleet: Fleet) -> None:
    fleet.env["STANDIN_BROKEN_LAUNCH"] = "n1"
    assert error_line(fleet.launch("ddp", "--hosts", "n0,n1", "--nproc", "1")) == (
        "gpumon: error: n1: could not start the run: [Errno 28] No space left on device; "
        "stopped the 1 node(s) already started"
    )
    (run0,) = fleet.node_runs("n0")
    assert run0["status"] == "killed"
    assert not fleet.processes()
    assert fleet.gpumon("runs", "--json").stdout.count('"groups": []') == 1  # no group left behind


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hosts", "n0", "--nproc", "1"], "--hosts needs two hosts or more (for one host, drop --hosts)"),
        (["--hosts", "n0,-x", "--nproc", "1"], "host '-x': a host name has letters"),
        (["--nproc", "1", "--ssh", "ssh"], "--ssh and --rdzv-host go with --hosts a,b"),
        (["--hosts", "n0,n1", "--nproc", "1", "--nnodes", "2"], "--hosts sets --nnodes, --node-rank"),
        (["--hosts", "n0,n1"], "--hosts needs --nproc"),
        (["--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "h:0"], "only node 0 picks its port (HOST:0)"),
        (["--node-rank", "1"], "--node-rank and --rdzv-endpoint go with --nnodes 2 or more"),
    ],
)
def test_bad_multi_node_options_get_one_line_and_exit_2(fleet: Fleet, args: list[str], message: str) -> None:
    assert message in error_line(fleet.gpumon("launch", "ddp", *args))
    assert not fleet.processes()
