"""The queue with real processes: simulated GPUs whose memory the test drives through a file, real CPU runs,
a real keeper (started by ``launch --queue``) and real supervisors."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.queue_helpers import Queue

T = 60.0  # generous: two cores, maybe loaded


@pytest.fixture
def qu(tmp_path: Path) -> Iterator[Queue]:
    queue = Queue(tmp_path)
    try:
        yield queue
    finally:
        queue.cleanup()


def test_a_run_queued_for_one_gpu_starts_when_one_frees_and_gets_its_index(qu: Queue) -> None:
    qu.gpus([71, 71])
    run = qu.queue("--gpus", "1", "--gpu-mem", "20G", env={"HOLD": "1"})
    reason = "GPU 0 is used by alice's pid 1234, python train.py (71 GiB)"
    assert wait_until(lambda: reason in (qu.runs()[run].get("queue_reason") or ""), timeout=T, step=0.3), qu.runs()[run]
    row = qu.runs()[run]
    assert row["status"] == "queued" and row["queue_position"] == 1
    assert row["queue_reason"].startswith("waiting for 1 GPU with 20 GiB free: ")
    table = qu.cli("runs").stdout
    assert f"{run} queued 1: waiting for 1 GPU with 20 GiB free: {reason}" in table
    assert "queued 1" in next(line for line in table.splitlines() if line.startswith(run))
    listing = qu.cli("queue").stdout.splitlines()
    assert listing[0].split() == ["#", "ID", "STATUS", "GPUS", "PRIORITY", "PROGRAM", "WHY"]
    assert listing[1].split()[:6] == ["1", run, "queued", "1", "0", "job.py"] and reason in listing[1]
    time.sleep(1.5)  # three settle times: still nothing fits, so it must still wait
    assert qu.status(run)["state"] == "queued"
    freed = time.time()
    qu.gpus([71, None])
    assert wait_until(lambda: qu.gpus_given(run), timeout=T), qu.status(run)
    assert qu.gpus_given(run) == "CVD 1 PCI_BUS_ID"  # NVML's index, in NVML's order
    assert qu.status(run)["started"] >= freed
    alerts = qu.home / "runs" / run / "alerts.jsonl"
    assert wait_until(alerts.exists, timeout=T)
    sent = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [a["kind"] for a in sent] == ["queue_started"] and "on GPU 1" in sent[0]["text"]
    assert wait_until(lambda: qu.status(run).get("state") == "finished", timeout=T)
    assert wait_until(lambda: qu.keeper() is None, timeout=T), "the keeper outlived its queue"


def test_two_queued_runs_never_get_the_same_gpu(qu: Queue) -> None:
    runs = [qu.queue("--gpus", "1", env={"RELEASE": qu.release(f"r{i}")}) for i in range(3)]
    started = lambda: [r for r in runs if qu.gpu(r)]  # noqa: E731
    assert wait_until(lambda: len(started()) == 2, timeout=T), [qu.status(r) for r in runs]
    first, second = started()
    gpus = {qu.gpu(first), qu.gpu(second)}
    assert gpus == {"0", "1"}
    third = next(r for r in runs if r not in (first, second))
    time.sleep(1.5)  # the two GPUs look free (their runs' memory never shows): reserved, not given again
    assert qu.status(third)["state"] == "queued"
    assert "reserved for" in qu.runs()[third]["queue_reason"]
    Path(qu.release(f"r{runs.index(first)}")).touch()
    assert wait_until(lambda: qu.gpu(third), timeout=T), qu.runs()[third]
    assert qu.gpu(third) == qu.gpu(first)  # the GPU the ended run gave back
    for i in range(3):
        Path(qu.release(f"r{i}")).touch()


def test_after_waits_for_success_and_a_failed_dependency_fails_the_run(qu: Queue) -> None:
    first = qu.queue(env={"HOLD": "1"})
    second = qu.queue("--after", first, env={"HOLD": "0"})
    bad = qu.queue(env={"HOLD": "0", "EXIT": "3"})
    blocked = qu.queue("--after", f"{bad},{first}")
    assert wait_until(lambda: qu.status(second).get("state") == "finished", timeout=T), qu.status(second)
    assert qu.status(second)["started"] >= qu.status(first)["ended"]
    assert wait_until(lambda: qu.status(blocked).get("state") == "failed", timeout=T), qu.status(blocked)
    assert qu.status(blocked)["error"]["message"] == f"dependency {bad} ended failed, not finished"
    assert "CVD" not in qu.log(blocked)
    row = qu.runs()[blocked]
    assert row["status"] == "failed" and "dependency" in row["error"]["message"]


def test_a_killed_keeper_loses_nothing_and_the_next_one_starts_the_runs(qu: Queue) -> None:
    qu.gpus([71, 71])
    runs = [qu.queue("--gpus", "1", "--gpu-mem", "20G", env={"HOLD": "1"}) for _ in range(2)]
    assert wait_until(lambda: all(row.get("queue_position") for row in qu.rows(*runs)), timeout=T, step=0.3)
    old = qu.keeper()
    assert old
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: qu.keeper() != old, timeout=T)
    assert {qu.status(r)["state"] for r in runs} == {"queued"}
    # Never two keepers: three started at once, one holds the lock, the others leave at once.
    keepers = [
        subprocess.Popen([sys.executable, "-m", "gpumon.core.queue.keeper", str(qu.home)], env=qu.env) for _ in range(3)
    ]
    try:
        assert wait_until(lambda: sum(k.poll() is not None for k in keepers) == 2, timeout=T)
        holder = qu.keeper()
        assert holder in {k.pid for k in keepers if k.poll() is None}
        qu.gpus([None, None])
        assert wait_until(lambda: all(qu.gpu(r) for r in runs), timeout=T), [qu.status(r) for r in runs]
        assert {qu.gpu(r) for r in runs} == {"0", "1"}
        assert wait_until(lambda: all(k.poll() is not None for k in keepers), timeout=T)  # gone once the queue is
    finally:
        for k in keepers:
            if k.poll() is None:
                k.kill()
            k.wait()


def test_a_killed_keeper_is_replaced_by_the_next_gpumon_that_lists_runs(qu: Queue) -> None:
    qu.gpus([71])
    run = qu.queue("--gpus", "1", "--gpu-mem", "20G", env={"HOLD": "0"})
    assert wait_until(lambda: qu.keeper() is not None, timeout=T)
    os.kill(qu.keeper() or 0, signal.SIGKILL)
    assert wait_until(lambda: qu.keeper() is None, timeout=T)
    qu.gpus([None])
    time.sleep(1.0)
    assert qu.status(run)["state"] == "queued"  # nobody keeps the queue: nothing starts, nothing is lost
    assert qu.runs()[run]["status"] == "queued"  # gpumon runs notices and starts a keeper
    assert wait_until(lambda: qu.status(run).get("state") == "finished", timeout=T), qu.status(run)


def test_slots_one_runs_three_cpu_runs_one_after_the_other(qu: Queue) -> None:
    runs = [qu.queue("--slots", "1", env={"HOLD": "0.6"}) for _ in range(3)]
    assert wait_until(lambda: all(qu.status(r).get("state") == "finished" for r in runs), timeout=T)
    spans = sorted((qu.status(r)["started"], qu.status(r)["ended"]) for r in runs)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.05, spans  # the next starts once the one before ended


def test_more_gpus_than_the_host_has_is_refused_at_launch(qu: Queue) -> None:
    done = qu.cli("launch", "script", "job.py", "--queue", "--gpus", "3")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["gpumon: error: --gpus 3: this host has 2 GPUs: it could never start"]
    assert not (qu.home / "runs").exists() or not list((qu.home / "runs").iterdir())  # nothing left behind


def test_a_queued_run_the_host_can_no_longer_hold_fails_with_an_alert(qu: Queue) -> None:
    qu.gpus([71, 71])
    run = qu.queue("--gpus", "2", "--gpu-mem", "20G")
    assert wait_until(lambda: qu.runs()[run].get("queue_position"), timeout=T)
    qu.gpus([71])  # a GPU gone from the host (lost, or taken out) while the run waited
    assert wait_until(lambda: qu.status(run).get("state") == "failed", timeout=T)
    assert "it needs 2 GPUs and this host has 1 GPU" in qu.status(run)["error"]["message"]
    path = qu.home / "runs" / run / "alerts.jsonl"
    assert wait_until(path.exists, timeout=T)  # written just after the run's end
    alerts = [json.loads(line) for line in path.read_text().splitlines()]
    assert [a["kind"] for a in alerts] == ["queue_impossible"]


def test_cancel_up_down_and_start_now(qu: Queue) -> None:
    qu.gpus([71, 71])
    a, b, c = (qu.queue("--gpus", "1", "--gpu-mem", "20G", env={"HOLD": "0"}) for _ in range(3))

    def positions() -> dict[str, int | None]:
        return {run: row.get("queue_position") for run, row in zip((a, b, c), qu.rows(a, b, c), strict=True)}

    assert wait_until(lambda: positions() == {a: 1, b: 2, c: 3}, timeout=T), positions()
    assert qu.cli("queue", "up", c).returncode == 0
    assert wait_until(lambda: positions() == {a: 1, c: 2, b: 3}, timeout=T), positions()
    assert qu.cli("queue", "down", a).returncode == 0
    assert wait_until(lambda: positions() == {c: 1, a: 2, b: 3}, timeout=T), positions()
    done = qu.cli("stop", b)  # stopping a queued run takes it out of the queue
    assert done.returncode == 0 and "cancelled" in done.stdout, done
    assert qu.status(b)["state"] == "stopped"
    assert qu.cli("queue", "start", a).returncode == 0
    assert wait_until(lambda: qu.status(a).get("state") == "finished", timeout=T), qu.status(a)
    assert qu.status(c)["state"] == "queued"
    listing = json.loads(qu.cli("queue", "--json").stdout)["queue"]
    assert [d["id"] for d in listing if d["status"] == "queued"] == [c]
    bad = qu.cli("queue", "cancel", a)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "--gpus", "0,1"], "with --queue, --gpus is how many GPUs"),
        (["--gpu-mem", "20G"], "go with --queue"),
        (["--queue", "--gpu-mem", "20G"], "--gpu-mem is per GPU: add --gpus N"),
        (["--queue", "--gpus", "1", "--gpu-mem", "lots"], "--gpu-mem takes a size like 20G"),
        (["--queue", "--after", "nope"], "--after: no run 'nope'"),
        (["--queue", "--gpus", "1", "--slots", "2"], "--slots is for runs with no GPU"),
    ],
)
def test_queue_mistakes_get_one_line_and_exit_2(qu: Queue, args: list[str], message: str) -> None:
    done = qu.cli("launch", "script", "job.py", *args)
    assert done.returncode == 2, done
    assert len(done.stderr.splitlines()) == 1 and message in done.stderr, done.stderr
