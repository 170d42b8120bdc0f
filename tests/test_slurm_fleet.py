"""``--slurm``: the nodes of the user's running jobs in the fleet, each streamed through ``srun --overlap``, and
sinfo's partitions as a summary line. On a real one-node Slurm (tests/slurm_cluster.py; skipped with the
reason where none can start); the parsers on output captured from it; without Slurm: one line, exit 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.fleet.slurm_source import ENDED, NOT_INSTALLED, SlurmFleet, settled, srun_reason
from gpumon.core.slurm.cluster import gpu_count, parse_hostnames, parse_jobs, parse_sinfo, slurm_env, state_kind
from tests.conftest import pilot_until, wait_until
from tests.slurm_cluster import Cluster, cluster_fixture

# -- what Slurm 22.05 printed on the test cluster (node "vm", one job running, no GRES) ------------------------------
SQUEUE = "1|1|debug|root|vm|wrap\n"
SINFO = "debug*|vm|mix|(null)|(null)|\n"
SRUN_NOT_FOUND = [
    "slurmstepd-vm: error: execve(): nosuchgpumon: No such file or directory",
    "srun: error: vm: task 0: Exited with exit code 2",
]
SRUN_NO_JOB = [
    "srun: error: Unable to confirm allocation for job 99: Invalid job id specified",
    "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 99",
]


def test_squeue_lines_become_jobs_and_a_stray_line_is_skipped() -> None:
    text = SQUEUE + "7|6_1|gpu|alice|gpu[01-02]|train | with a bar\nsqueue: warning: something\n8|8|gpu|bob||pending\n"
    jobs = parse_jobs(text)
    assert [(j.id, j.shown, j.partition, j.user, j.nodelist, j.name) for j in jobs] == [
        ("1", "1", "debug", "root", "vm", "wrap"),
        ("7", "6_1", "gpu", "alice", "gpu[01-02]", "train | with a bar"),
    ]
    assert parse_hostnames("gpu01\ngpu02\n\n") == ("gpu01", "gpu02")


def test_sinfo_counts_nodes_by_state_and_free_gpus_per_partition() -> None:
    summary = parse_sinfo(SINFO)
    assert summary.line() == "Slurm  debug: 1 mixed, no GPUs"  # no GRES: said, not an error
    text = (
        "gpu*|g01|mix|gpu:a100:4(S:0-1)|gpu:a100:1(IDX:0)|\n"
        "gpu*|g02|idle|gpu:a100:4(S:0-1)|gpu:a100:0(IDX:N/A)|\n"
        "gpu*|g03|alloc|gpu:a100:4|gpu:a100:4(IDX:0-3)|\n"
        "gpu*|g04|drain|gpu:a100:4|gpu:0|\n"
        "gpu*|g05|idle*|gpu:4|gpu:0|\n"
        "cpu|c01|idle|(null)|(null)|\n"
    )
    gpu, cpu = parse_sinfo(text).partitions
    assert (gpu.name, gpu.default, gpu.idle, gpu.mixed, gpu.allocated, gpu.down) == ("gpu", True, 1, 1, 1, 2)
    assert (gpu.gpus, gpu.gpus_free) == (12, 7)  # down nodes' GPUs count for nothing; alloc has none free
    assert gpu.words() == "gpu: 1 idle, 1 mixed, 1 allocated, 2 down, 7 of 12 GPUs free"
    assert cpu.words() == "cpu: 1 idle, no GPUs"
    assert gpu_count("gpu:a100:2(IDX:0,2),gpu:1,shard:8") == 3
    assert [state_kind(s) for s in ("mix~", "alloc", "down*", "comp", "planned")] == [
        "mixed", "allocated", "down", "other", "other",
    ]  # fmt: skip


def test_srun_failures_are_reasons_in_words() -> None:
    assert srun_reason(2, SRUN_NOT_FOUND) == (NOT_INSTALLED, SRUN_NOT_FOUND[0])
    assert srun_reason(1, SRUN_NO_JOB)[0] == ENDED
    ended = ["srun: error: Unable to create step for job 2: Job/step already completing or completed"]
    assert srun_reason(1, ended) == (ENDED, ended[0])
    assert srun_reason(-15, []) == ("srun ended by signal 15", None)


def test_an_allocations_slurm_variables_do_not_reach_the_step() -> None:
    env = slurm_env({"SLURM_CONF": "/c", "SLURM_JOB_ID": "3", "SLURM_STEP_GRES": "none", "PATH": "/bin"})
    assert env == {"SLURM_CONF": "/c", "PATH": "/bin"}


# -- without Slurm -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["fleet", "--slurm"], ["--slurm"], ["fleet", "--slurm", "--json"]])
def test_without_slurm_on_path_one_line_and_exit_2(tmp_path: Path, argv: list[str]) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "GPUMON_CONFIG_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "gpumon", *argv], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpumon: error: squeue not found: --slurm needs"), lines


@pytest.mark.skipif(shutil.which("squeue") is None, reason="Slurm's commands are not installed")
def test_a_controller_that_does_not_answer_is_the_reason_and_exit_1(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"  # a cluster whose controller's port has no one behind it
    conf.write_text(
        "ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=2\n"
        "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=ALL Default=YES\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf), "GPUMON_CONFIG_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "fleet", "--slurm"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done
    assert done.stdout.startswith("Slurm  squeue failed: ") and "no running job" not in done.stdout
    assert done.stderr.startswith("gpumon: squeue failed: ") and "controller" in done.stderr, done.stderr


# -- on a real cluster ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_fixture("gpumon-slurmfleet-")


@pytest.fixture
def slurm_env_vars(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    return cluster.env


def submit(cluster: Cluster, *options: str, wrap: str = "sleep 300") -> str:
    """A job of ours, running, whose CPUs are all taken by a step (so only an --overlap step can join it)."""
    done = cluster.run("sbatch", "--parsable", "-o", "/dev/null", *options, "--wrap", wrap)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]

    def running() -> bool:
        out = cluster.run("squeue", "--noheader", "-j", job, "--format=%T").stdout.split()
        steps = cluster.run("squeue", "--noheader", "-s", "-j", job, "--format=%i").stdout.split()
        return out == ["RUNNING"] and (f"{job}.0" in steps or "srun" not in wrap)

    assert wait_until(running, timeout=60, step=0.5), cluster.run("squeue").stdout
    return job


def steps_named_gpumon(cluster: Cluster) -> list[str]:
    out = cluster.run("squeue", "--noheader", "-s", "--format=%i|%j|%N").stdout
    return [line for line in out.splitlines() if "|gpumon|" in line]


def test_the_node_shows_in_the_fleet_through_srun_overlap(cluster: Cluster, tmp_path: Path) -> None:
    # The job's every CPU is in use by its own step: a step without --overlap would wait for them.
    job = submit(cluster, "-c", str(cluster.cpus), wrap=f"srun -c {cluster.cpus} sleep 300")
    try:
        env = {**os.environ, **cluster.env, "GPUMON_CONFIG_DIR": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "-m", "gpumon", "fleet", "--slurm", "--json"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        hosts = {h["name"]: h for h in doc["hosts"]}
        node = hosts[f"{cluster.node} (job {job})"]
        assert node["address"] == cluster.node
        assert node["link"] == "live", node
        snapshot = node["snapshot"]
        assert snapshot["host"]["hostname"] == cluster.node  # sampled on the node, inside the job
        assert snapshot["devices"] == [] and snapshot["source"] == "none"  # no GPU here: said as such
        assert node["reason"] is None and node["runs_reason"] is None
        assert [j["id"] for j in doc["slurm"]["jobs"]] == [job]
        assert doc["slurm"]["jobs"][0]["nodes"] == [cluster.node]
        (debug,) = doc["slurm"]["partitions"]
        assert debug["name"] == "debug" and debug["allocated"] + debug["mixed"] == 1 and debug["gpus"] == 0
        assert debug["default"] is True  # slurm.conf's Default=YES, as sinfo's "debug*" says
        assert "no GPUs" in doc["slurm"]["line"] and "1 running job of yours on 1 node" in doc["slurm"]["line"]
        assert wait_until(lambda: not steps_named_gpumon(cluster), timeout=30, step=0.5), steps_named_gpumon(cluster)
        table = subprocess.run(
            [sys.executable, "-m", "gpumon", "fleet", "--slurm"], env=env, capture_output=True, text=True, timeout=120
        )
        assert table.returncode == 0, table.stderr
        first, *rest = table.stdout.splitlines()
        assert first.startswith("Slurm  1 running job of yours on 1 node  ·  debug: ") and "no GPUs" in first
        assert any(line.startswith(f"{cluster.node} (job {job})") and " live " in line for line in rest), table.stdout
    finally:
        cluster.cancel_all()
    assert not steps_named_gpumon(cluster)


def test_a_new_job_adds_its_node_and_an_ended_one_removes_it(cluster: Cluster, slurm_env_vars: dict[str, str]) -> None:
    fleet = SlurmFleet(interval=0.5, refresh=1.0, runs_every=0)
    fleet.start()
    try:
        fleet.wait(settled, 30)
        assert fleet.state() == () and "no running job of yours" in fleet.summary()
        job = submit(cluster)
        name = f"{cluster.node} (job {job})"
        fleet.wait(lambda f: any(h.host.name == name and h.link == "live" for h in f.state()), 60)
        assert [(h.host.name, h.link) for h in fleet.state()] == [(name, "live")], fleet.state()
        (step,) = steps_named_gpumon(cluster)  # the stream is a step of the job itself, on its node
        assert step.startswith(f"{job}.") and step.endswith(f"|{cluster.node}")
        cluster.run("scancel", job)
        # the hosts and the summary line come from different squeue reads: wait for both
        fleet.wait(lambda f: f.state() == () and "no running job of yours" in f.summary(), 60)
        assert fleet.state() == () and "no running job of yours" in fleet.summary(), fleet.summary()
    finally:
        fleet.stop()
        cluster.cancel_all()
    # scancel returns before slurmd has ended the job's steps (up to KillWait under load)
    assert wait_until(lambda: not steps_named_gpumon(cluster), 60), steps_named_gpumon(cluster)


# -- the Fleet view's header ---------------------------------------------------------------------------------------
async def test_the_fleet_view_shows_the_clusters_summary_line_as_text_not_markup() -> None:
    from gpumon.core.fleet.combined import CombinedFleet
    from gpumon.tui.views.fleet.view import FleetView
    from tests.fleet_data import StandInFleet, fleet_app, mixed_fleet

    class SlurmStandIn(StandInFleet):
        line = "Slurm  no running job of yours  ·  [b]gpu[/b]: 2 idle, 3 of 8 GPUs free"

        def summary(self) -> str:
            return self.line

    standin = SlurmStandIn([mixed_fleet()], interval=0)
    app = fleet_app(CombinedFleet([standin]))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        line = app.query_one(FleetView).query_one("#fleet-slurm")
        assert line.display and str(line.render()) == SlurmStandIn.line
        standin.line = "Slurm  squeue failed: slurm_load_jobs error: Unable to contact slurm controller"
        with contextlib.suppress(AssertionError):  # looks 5 times a second, redraws each second; said below
            await pilot_until(pilot, lambda: str(line.render()) == standin.line, timeout=30)
        assert str(line.render()) == standin.line
    plain = fleet_app(StandInFleet([mixed_fleet()], interval=0))  # no Slurm: no line
    async with plain.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        assert not plain.query_one(FleetView).query_one("#fleet-slurm").display


def test_a_node_without_gpumon_says_so_and_the_config_names_the_command(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[slurm]\ngpumon = ["/nonexistent/bin/gpumon"]\n')
    job = submit(cluster)
    try:
        env = {**os.environ, **cluster.env, "GPUMON_CONFIG_DIR": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "-m", "gpumon", "fleet", "--slurm", "--json"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        (node,) = json.loads(done.stdout)["hosts"]
        assert (node["name"], node["link"], node["reason"]) == (f"{cluster.node} (job {job})", "down", NOT_INSTALLED)
        assert "/nonexistent/bin/gpumon" in node["detail"]  # slurmstepd's own line
    finally:
        cluster.cancel_all()


@pytest.mark.skipif(shutil.which("squeue") is None, reason="Slurm's commands are not installed")
def test_a_wrong_slurm_gpumon_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[slurm]\ngpumon = 3\n")
    env = {**os.environ, "GPUMON_CONFIG_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "gpumon", "fleet", "--slurm"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"gpumon: error: {tmp_path / 'config.toml'}: [slurm] gpumon must be the command on the nodes, "
        'e.g. gpumon = ["~/venv/bin/gpumon"]'
    ]
