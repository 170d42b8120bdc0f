"""Runs as Slurm jobs, against a real one-node Slurm on this machine (tests/slurm_cluster.py): a DDP run
submitted with sbatch and started with srun + torchrun, a job that waits and is cancelled, jobs that Slurm
ends at their time and memory limits, and the one line a user sees where Slurm is not installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.slurm_cluster import Cluster, cluster_fixture

pytest.importorskip("torch")
Cli = Callable[..., subprocess.CompletedProcess[str]]

STEPS = """
import time, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(100000):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.05)
"""
PLANNED = """
import time, torch
from tqdm import tqdm
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in tqdm(range(5000)):  # its total: 5,000 steps of at least 0.05 s, more than its minute
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.05)
"""
EXITS = """
import sys
print("loading config", flush=True)
print("config says: stop here", flush=True)
sys.exit(3)
"""
GROWS = """
import time, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []
for _ in range(100000):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    kept.append(bytearray(16 << 20))  # 16 MiB a step, never freed
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # 6 CPUs: the jobs below run side by side; most of their time is waiting
    yield from cluster_fixture("gpumon-slurm-", cpus=6)


@pytest.fixture(scope="module")
def cli(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    where = tmp_path_factory.mktemp("slurm-runs")
    (where / "steps.py").write_text(STEPS)
    (where / "grows.py").write_text(GROWS)
    (where / "planned.py").write_text(PLANNED)
    (where / "exits.py").write_text(EXITS)
    (where / "to_gpu.py").write_text("import torch\ntorch.nn.Linear(2, 2).to(0)\n")  # an int device is a GPU
    env = {**os.environ, **cluster.env, "GPUMON_HOME": str(where / "home"), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("GPUMON_RUN_DIR", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, cwd=where, timeout=120
        )

    yield run
    cluster.cancel_all()


@pytest.fixture(scope="module")
def limited(cli: Cli) -> dict[str, dict[str, Any]]:
    """Jobs Slurm will end, submitted first: their minute passes while the other tests run."""
    return {
        "time": submit(cli, "script", "steps.py", "--time", "1"),  # Slurm's smallest limit: a minute
        "planned": submit(cli, "script", "planned.py", "--time", "1"),
        "memory": submit(cli, "script", "grows.py", "--sbatch-arg=--mem=400M"),
    }


def rows(cli: Cli) -> dict[str, dict[str, Any]]:
    done = cli("runs", "--json")
    assert done.returncode == 0, done.stderr
    return {r["id"]: r for r in json.loads(done.stdout)["runs"]}


def submit(cli: Cli, *args: str) -> dict[str, Any]:
    done = cli("launch", *args[:1], "--slurm", "--json", *args[1:])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


WAITING = ("pending", "starting", "running", "stopping", "stalled")


def ended(cli: Cli, cluster: Cluster, run: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The run's row once it ended: waited for in squeue (a C client, ~10 ms; its job leaves the queue at its end),
    then asked of `gpumon runs --json` (a Python start and sacct, ~0.3 CPU-s: never a poll over a job's minute)."""
    job = run["slurm_job_id"]
    assert wait_until(lambda: job not in cluster.jobs(), timeout=timeout, step=0.5), cluster.jobs()
    found = wait_until(lambda: (r := rows(cli)[run["id"]])["status"] not in WAITING and r, timeout=60, step=1.0)
    assert found, rows(cli)[run["id"]]
    return found


def test_a_cpu_ddp_job_runs_its_two_ranks_through_srun_and_torchrun(
    cli: Cli, cluster: Cluster, limited: dict[str, dict[str, Any]]
) -> None:
    run = submit(cli, "ddp", "--nproc", "2", "--", "--epochs", "1")
    assert run["slurm_job_id"].isdigit() and run["state"] in ("pending", "starting", "running")
    row = ended(cli, cluster, run, timeout=180)
    assert row["status"] == "finished", row
    assert row["slurm_job_id"] == run["slurm_job_id"] and row["slurm_state"] == "COMPLETED"
    assert row["slurm_nodes"] == cluster.node and row["step"] and row["step"] > 0
    events = Path(row["dir"], "events")
    assert {p.name.split(".")[0] for p in events.iterdir()} >= {"launcher", "rank0", "rank1"}  # both ranks' telemetry
    script = Path(row["dir"], "job.sbatch").read_text()
    assert "gpumon.core.runs.supervision.supervisor" in script and "--cpus-per-task=2" in script


def test_a_waiting_job_shows_why_and_stop_cancels_it(cli: Cli, cluster: Cluster) -> None:
    run = submit(cli, "ddp", "--nproc", "2", "--sbatch-arg=--begin=now+1hour")  # it waits, whatever is free
    waiting = wait_until(lambda: (r := rows(cli)[run["id"]])["slurm_reason"] and r, timeout=60, step=0.5)
    assert waiting and waiting["status"] == "pending" and waiting["slurm_state"] == "PENDING", waiting
    assert waiting["slurm_reason"] == "BeginTime", waiting
    listing = cli("runs").stdout
    assert f"pending (job {run['slurm_job_id']}: BeginTime" in listing, listing

    stopped = cli("stop", run["id"])
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"cancelled job {run['slurm_job_id']}" in stopped.stdout and f"stopped {run['id']}" in stopped.stdout
    assert run["slurm_job_id"] not in cluster.jobs()
    row = rows(cli)[run["id"]]
    assert row["status"] == "stopped" and row["slurm_state"] == "CANCELLED", row
    assert row["slurm_reason"] is None, row  # Slurm keeps Reason=BeginTime for it: a cancelled job waits for nothing
    assert row["error"]["message"] == "the job was cancelled while it waited in the queue (BeginTime): it never started"


def test_a_job_that_needs_a_gpu_it_did_not_ask_for_is_told_to_ask_slurm(cli: Cli, cluster: Cluster) -> None:
    run = submit(cli, "script", "to_gpu.py")
    row = ended(cli, cluster, run, timeout=120)
    assert row["status"] == "failed" and row["slurm_state"] == "FAILED", row
    doctor = json.loads(cli("doctor", run["id"], "--json").stdout)
    assert doctor["failure"]["kind"] == "no_gpu"
    first = doctor["advice"][0]
    assert first["key"] == "gpus_per_node" and "--slurm --gpus-per-node 1" in first["change"], first


def test_jobs_ended_by_their_time_and_memory_limits_are_explained(
    cli: Cli, cluster: Cluster, limited: dict[str, dict[str, Any]]
) -> None:
    slow, big = limited["time"], limited["memory"]
    grown = ended(cli, cluster, big, timeout=120)
    assert grown["status"] == "failed" and grown["slurm_state"] in ("OUT_OF_MEMORY", "FAILED"), grown
    doctor = json.loads(cli("doctor", big["id"], "--json").stdout)
    assert doctor["failure"]["kind"] == "slurm_out_of_memory", doctor["failure"]
    [mem] = [a for a in doctor["advice"] if a["key"] == "mem"]
    assert "--sbatch-arg=--mem=" in mem["change"] and "peak resident memory" in mem["why"], mem

    timed = ended(cli, cluster, slow, timeout=200)
    assert timed["status"] == "failed" and timed["slurm_state"] == "TIMEOUT", timed
    assert "time limit" in timed["error"]["message"], timed["error"]
    doctor = json.loads(cli("doctor", slow["id"], "--json").stdout)
    title = doctor["failure"]["title"]
    assert doctor["failure"]["kind"] == "slurm_timeout" and title.endswith("time limit (00:01:00)"), title  # --time 1
    keys = [a["key"] for a in doctor["advice"]]
    assert keys[:2] == ["time", "requeue"], keys
    time_advice = doctor["advice"][0]
    assert "MaxTime=UNLIMITED" in time_advice["change"], time_advice
    # no total steps to project from: what the run reached in its minute, and no made-up --time
    assert time_advice["title"] == "ask for a --time more than 00:01:00", time_advice
    assert time_advice["why"].startswith(f"reached step {timed['step']:,} in 00:0"), (time_advice, timed["step"])


def test_slurm_times_are_read_in_every_form_sbatch_takes() -> None:
    from gpumon.core.slurm.times import seconds, slurm_time

    forms = {"1": 60, "1:30": 90, "2:00:00": 7200, "1-12": 129600, "1-2:03": 93780, "1-02:03:04": 93784}
    assert {text: seconds(text) for text in forms} == forms  # sbatch(1): "1" is a minute, "1:00" too (squeue's %l)
    assert seconds("UNLIMITED") is None and seconds("INFINITE") is None and seconds("soon") is None
    assert (slurm_time(60), slurm_time(75.4), slurm_time(93784)) == ("00:01:00", "00:01:15", "1-02:03:04")


def test_without_slurm_the_options_say_so_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "PATH": os.path.dirname(sys.executable)}
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "launch", "ddp", "--slurm"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "sbatch not found" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "launch", "ddp", "--nodes", "2"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and "--nodes goes with --slurm" in done.stderr, done.stderr


@pytest.mark.skipif(
    shutil.which("sbatch") is None, reason="Slurm's sbatch is not installed (apt-get install slurm-wlm)"
)
def test_the_launch_forms_slurm_field_takes_the_options_of_gpumon_launch(tmp_path: Path) -> None:
    from gpumon.core.runs.record.spec import SpecError
    from gpumon.tui.views.runs.form_spec import FormValues, spec_values, values_from_spec

    values = FormValues(kind="ddp", nproc="2", slurm="job --nodes 2 --time 4:00:00 --qos=high")
    spec = spec_values(values, 0, str(tmp_path), None)
    assert spec.slurm is not None and spec.slurm["nodes"] == 2 and spec.slurm["time"] == "4:00:00"
    assert spec.slurm["sbatch_args"] == ["--qos=high"]
    assert values_from_spec(spec).slurm == "job --nodes 2 --time 4:00:00 --qos=high"  # a clone submits it again
    for wrong, said in (("--nodes two", "whole number"), ("job please", "is not an option"), ("--time", "needs")):
        with pytest.raises(SpecError, match=said):
            spec_values(FormValues(kind="ddp", slurm=wrong), 0, str(tmp_path), None)
    with pytest.raises(SpecError, match="choose one"):
        spec_values(FormValues(kind="ddp", slurm="job", hosts="a,b"), 0, str(tmp_path), None)


def test_a_job_ended_at_its_time_limit_is_told_the_time_its_steps_need(
    cli: Cli, cluster: Cluster, limited: dict[str, dict[str, Any]]
) -> None:
    timed = ended(cli, cluster, limited["planned"], timeout=200)
    assert timed["status"] == "failed" and timed["slurm_state"] == "TIMEOUT", timed
    assert timed["total_steps"] == 5000, timed  # tqdm's total
    (advice,) = [a for a in json.loads(cli("doctor", timed["id"], "--json").stdout)["advice"] if a["key"] == "time"]
    asked = advice["title"].removeprefix("ask for --time ")
    hours, minutes, seconds = map(int, asked.split(":"))
    assert seconds == 0 and advice["change"].startswith(f"--time {asked} (partition debug"), advice
    # the outside reference: tqdm's own estimate of the time left, in its last frame before Slurm ended the job
    log = Path(timed["dir"], "logs", "rank0.log").read_text(errors="replace")
    estimates = re.findall(r"\d+/5000 \[[\d:]+<([\d:]+), ", log)  # "1181/5000 [01:03<03:27, 18.41it/s]"
    assert estimates, log[-2000:]
    tqdm_left = estimates[-1]
    left = advice["why"].split("need ~")[1].split(" more")[0]  # "00:03:27"
    to_s = lambda text: sum(int(p) * 60**i for i, p in enumerate(reversed(text.split(":"))))  # noqa: E731
    assert abs(to_s(left) - to_s(tqdm_left)) <= 0.15 * to_s(tqdm_left) + 5, (left, tqdm_left, advice)
    assert "of 5,000 (its tqdm bar's total)" in advice["why"] and advice["why"].endswith("more; +20%"), advice
    # what it asks covers the run so far and what is left, and no more than +20% and a minute over it
    need = to_s(left) + timed["ended"] - timed["started"]
    assert need * 1.2 - 1 <= (hours * 60 + minutes) * 60 <= need * 1.2 + 61, (asked, need)


def test_a_failed_jobs_reason_is_the_scripts_last_lines_not_sruns(cli: Cli, cluster: Cluster) -> None:
    run = submit(cli, "script", "exits.py")
    row = ended(cli, cluster, run, timeout=120)
    assert row["status"] == "failed" and row["exit_code"] == 3, row
    log = Path(row["dir"], "logs", "rank0.log").read_text()
    assert "srun: error:" in log and "_step_signal: Terminating StepId=" in log, log  # Slurm's own lines are there
    doctor = json.loads(cli("doctor", run["id"], "--json").stdout)
    assert doctor["headline"] == "the script exited with status 3: loading config | config says: stop here", doctor
    assert doctor["failure"]["evidence"] == ["loading config", "config says: stop here"], doctor["failure"]
    alerts = [json.loads(line) for line in Path(row["dir"], "alerts.jsonl").read_text().splitlines()]
    (failed,) = [a for a in alerts if a["kind"] == "failed"]
    # the doctor's headline, then its fix: never srun's own last line
    assert failed["text"].startswith(
        "failed: the script exited with status 3: loading config | config says: stop here. Fix: "
    ), failed
    assert "srun" not in failed["text"] and "_step_signal" not in failed["text"], failed


def test_a_run_launched_inside_a_job_is_this_hosts_and_records_the_job_around_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A batch script that runs ``gpumon launch`` (no --slurm): the run is local, its supervisor records the job
    it starts in (Slurm's state, the job's nodes) but no job id, and its end is its own, not Slurm's."""
    (tmp_path / "quick.py").write_text("print('inside the job', flush=True)\n")
    batch = tmp_path / "job.sh"
    batch.write_text(f"#!/bin/bash\nexec {sys.executable} -m gpumon launch script quick.py --follow\n")
    env = {**os.environ, **cluster.env, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("GPUMON_RUN_DIR", None)
    sbatch = ["sbatch", "--parsable", f"--chdir={tmp_path}", f"--output={tmp_path}/job.out", str(batch)]
    done = subprocess.run(sbatch, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    assert wait_until(lambda: job not in cluster.jobs(), timeout=120, step=0.5), cluster.jobs()
    listed = subprocess.run(
        [sys.executable, "-m", "gpumon", "runs", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    [row] = json.loads(listed.stdout)["runs"]
    assert row["status"] == "finished" and row["exit_code"] == 0, (row, (tmp_path / "job.out").read_text())
    assert (row["slurm_job_id"], row["slurm_state"], row["slurm_reason"]) == (None, None, None), row
    status = json.loads(Path(row["dir"], "status.json").read_text())
    assert status["slurm_state"] == "RUNNING" and status["slurm_nodes"] == cluster.node, status
    assert "slurm_job_id" not in status and "slurm_end" not in status and "slurm_messages" not in status, status
    assert "inside the job" in Path(row["dir"], "logs", "rank0.log").read_text()
