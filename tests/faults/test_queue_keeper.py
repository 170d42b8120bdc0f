"""A queue whose keeper died or was stopped never stalls in silence: a run's end starts a keeper when runs
wait and none looks, and a stopped keeper's reasons are said to be stale, with the fix. Real keepers,
supervisors and CPU runs; nothing here runs `gpumon runs` or `gpumon queue` (which would start a keeper) until
the point is made."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.queue_helpers import Queue

T = 90.0  # two cores, maybe loaded


@pytest.fixture
def qu(tmp_path: Path) -> Iterator[Queue]:
    queue = Queue(tmp_path)
    try:
        yield queue
    finally:
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(queue.keeper() or 0, signal.SIGCONT)
        queue.cleanup()


def _first_then_second(qu: Queue) -> tuple[str, str]:
    """A CPU run held until released, and one queued after it; both seen by the keeper."""
    first = qu.queue(env={"RELEASE": qu.release("first"), "HOLD": "300"})
    assert wait_until(lambda: qu.status(first).get("state") == "running", timeout=T), qu.status(first)
    second = qu.queue("--after", first, env={"HOLD": "0"})
    plan = qu.home / "queue" / "plan.json"
    assert wait_until(lambda: second in plan.read_text() if plan.exists() else False, timeout=T)
    return first, second


def test_a_killed_keeper_is_replaced_when_a_run_ends_with_nobody_looking(qu: Queue) -> None:
    first, second = _first_then_second(qu)
    old = qu.keeper()
    assert old
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: qu.keeper() is None, timeout=T)
    Path(qu.release("first")).write_text("")
    # Only the first run's supervisor is there to notice: it starts a keeper as it ends.
    assert wait_until(lambda: qu.status(second).get("state") == "finished", timeout=T), qu.status(second)
    assert qu.status(first)["state"] == "finished"
    assert qu.status(second)["started"] >= qu.status(first)["ended"]


def test_a_stopped_keepers_reasons_are_said_stale_with_the_fix(qu: Queue) -> None:
    first, second = _first_then_second(qu)
    keeper = qu.keeper()
    assert keeper
    os.kill(keeper, signal.SIGSTOP)
    Path(qu.release("first")).write_text("")
    assert wait_until(lambda: qu.status(first).get("state") == "finished", timeout=T), qu.status(first)
    assert qu.status(second)["state"] == "queued"  # a stopped keeper starts nothing, and no second one runs
    assert qu.keeper() == keeper
    done = qu.cli("queue", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = [r for r in json.loads(done.stdout)["queue"] if r["id"] == second]
    assert f"waiting for {first}" in row["queue_reason"]  # what the keeper last knew, said as old
    assert f"stale: the queue's keeper (pid {keeper}) is stopped" in row["queue_reason"]
    assert f"kill -CONT {keeper}" in row["queue_reason"]
    runs = {r["id"]: r for r in json.loads(qu.cli("runs", "--json").stdout)["runs"]}
    assert "stale" in runs[second]["queue_reason"]
    os.kill(keeper, signal.SIGCONT)
    assert wait_until(lambda: qu.status(second).get("state") == "finished", timeout=T), qu.status(second)
