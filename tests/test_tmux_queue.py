"""A real terminal: queued runs in the Runs view with their place and reason; +, T (cancel) and S (start now)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import requires_tmux, wait_until
from tests.queue_helpers import Queue
from tests.tmux_term import Tmux

pytestmark = [pytest.mark.tmux(140, 36), requires_tmux]


@pytest.fixture
def qu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Queue]:
    queue = Queue(tmp_path)
    for key in ("GPUMON_HOME", "GPUMON_SIMULATE_STATE", "GPUMON_QUEUE_SETTLE_S", "GPUMON_QUEUE_INTERVAL_S"):
        monkeypatch.setenv(key, queue.env[key])  # the app in tmux sees the same queue and GPUs
    try:
        yield queue
    finally:
        queue.cleanup()


def test_queued_rows_show_their_place_and_reason_and_the_keys_act_on_them(qu: Queue, tmux: Tmux) -> None:
    qu.gpus([71])
    tmux.start([sys.executable, "-m", "gpumon", "--interval", "0.5"])
    tmux.wait_for("SIMULATED")
    tmux.keys("r")
    tmux.wait_for("runs · 0")
    # A run that appears while the app is open becomes the selected one (newest.py): queue them now.
    first = qu.queue("--gpus", "1", "--gpu-mem", "20G", env={"HOLD": "0"})
    tmux.wait_for(f"{first} · queued 1", timeout=30)
    second = qu.queue("--gpus", "1", "--gpu-mem", "20G", env={"HOLD": "0"})
    # Each queued row shows its place in the status column; the selected one its reason in the detail.
    tmux.wait_for("queued 1", "queued 2", timeout=30)
    tmux.wait_for(
        f"{second} · queued 2",
        "waiting for 1 GPU with 20 GiB free: GPU 0 is used by alice's pid 1234, python train.py (71 GiB)",
        timeout=30,
    )
    tmux.keys("+")  # raise it: first in line now
    tmux.wait_for(f"{second} · queued 1", timeout=30)
    assert wait_until(lambda: qu.runs()[first].get("queue_position") == 2, timeout=30)
    tmux.keys("T")  # stop on a queued run cancels it, asked first
    tmux.wait_for(f"Cancel queued run {second}?")
    tmux.keys("y")
    tmux.wait_for(f"Cancelled {second}", timeout=30)
    assert qu.status(second)["state"] == "stopped"
    third = qu.queue("--gpus", "1", "--gpu-mem", "20G", env={"HOLD": "0"})
    tmux.wait_for(f"{third} · queued 2", timeout=30)
    tmux.keys("S")
    tmux.wait_for(f"Start {third} now?")
    tmux.keys("y")
    assert wait_until(lambda: qu.status(third).get("state") == "finished", timeout=60), qu.status(third)
    assert qu.gpus_given(third) == "CVD 0 PCI_BUS_ID"  # started now, on the busy GPU, as asked
    assert qu.status(first)["state"] == "queued"  # passed by the run started now, still waiting
    tmux.wait_for("finished", timeout=30)
    tmux.keys("q")
    assert wait_until(tmux.pane_dead, timeout=10), tmux.screen()
    assert "Traceback" not in tmux.screen()
