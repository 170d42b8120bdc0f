"""A real terminal: open the Runs view in tmux, launch a run from the form, watch it progress, quit."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from gpumon.core.runs.record.store import RunStore
from tests.conftest import requires_tmux, wait_until
from tests.tmux_term import Tmux, start_simulated

pytestmark = [pytest.mark.tmux(100, 30), requires_tmux]

HAS_DDP_TRAINER = importlib.util.find_spec("trainers.ddp") is not None
SCRIPT = """\
import time
from gpumon import telemetry
for step in range(1, 31):
    telemetry.log(step=step, loss=1.0 / step)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
"""


def test_launch_from_the_runs_view_and_watch_it_progress(tmux: Tmux, run_home: Path, tmp_path: Path) -> None:
    start_simulated(tmux)
    tmux.keys("r")
    tmux.wait_for("runs · 0", "No run selected", "n new run")
    tmux.keys("n")
    tmux.wait_for("New run", "arguments")
    if HAS_DDP_TRAINER:  # the defaults: ddp on digits, 2 processes on a CPU
        kind = "ddp"
        tmux.keys("Tab", "Tab")  # to the program field: enter on the kind list would open it
        assert wait_until(lambda: "blank: the kind's own trainer" in tmux.screen(), timeout=5), tmux.screen()
    else:  # pick 'script' in the kind list, then type the path
        kind = "script"
        (tmp_path / "tiny.py").write_text(SCRIPT)
        tmux.keys("Down")
        tmux.wait_for("model-parallel")
        tmux.keys("Down", "Down", "Down", "Down", "Enter")
        assert wait_until(lambda: re.search(r"kind\s+script", tmux.screen()), timeout=5), tmux.screen()
        tmux.keys("Tab")
        tmux.keys("-l", str(tmp_path / "tiny.py"))
        tmux.wait_for("tiny.py")
    tmux.keys("Enter")
    tmux.wait_for(f"Started {kind}-", timeout=30)
    row = re.compile(rf"{kind}-\S+\s+(?:{kind}\s+)?(running|finished)\s+\S+\s+\d+\s")  # a step number in the row
    screen = wait_until(lambda: row.search(s := tmux.screen()) and s, timeout=90)
    assert screen, f"the run never showed progress:\n{tmux.screen()}"
    assert "Traceback" not in screen
    done = wait_until(lambda: "finished" in (s := tmux.screen()) and s, timeout=90)
    assert done, f"the run never finished:\n{tmux.screen()}"
    assert "loss / step" in done and "memory / step" in done
    tmux.keys("q")
    assert wait_until(tmux.pane_dead, timeout=10), tmux.screen()
    assert "Traceback" not in tmux.screen()


SLOW = """\
import os, sys, time
from gpumon import telemetry
end = time.monotonic() + 600  # a test that failed before its gate never leaves this run behind for good
for step in range(1, 41):
    telemetry.log(step=step, loss=1.0 / step)
    print(f"step {step}", flush=True)
    time.sleep(0.1)  # telemetry writes metrics at most at the step rate: one each
    while step == 20 and not os.path.exists(sys.argv[1]) and time.monotonic() < end:  # until the test closed gpumon
        time.sleep(0.05)
"""


def test_quit_while_a_run_is_live_and_reopen_finds_it_whole(tmux: Tmux, run_home: Path, tmp_path: Path) -> None:
    from gpumon.core.events import EventReader
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.supervision.launcher import launch, wait

    (tmp_path / "slow.py").write_text(SLOW)
    store = RunStore(run_home)
    gate = tmp_path / "go"
    record = launch(RunSpec(kind="script", program=str(tmp_path / "slow.py"), args=(str(gate),)), store, 0)
    tmux.start([sys.executable, "-m", "gpumon", "--simulate", "1", "--interval", "0.5"])
    tmux.wait_for("SIMULATED")
    tmux.keys("r")
    tmux.wait_for("running")
    tmux.keys("q")  # gpumon closes while the run is mid-way
    assert wait_until(tmux.pane_dead, timeout=10), tmux.screen()
    gate.touch()
    final = wait(record, store, timeout=30)
    assert final.state == "finished"
    events = EventReader(final.dir).poll()
    assert [e["step"] for e in events if e["type"] == "metrics"] == list(range(1, 41))  # nothing lost
    assert final.log_path(0).read_text().splitlines()[-1] == "step 40"

    reopened = Tmux(100, 30)
    try:
        reopened.start([sys.executable, "-m", "gpumon", "--simulate", "1"])
        reopened.wait_for("SIMULATED")
        reopened.keys("r")
        screen = reopened.wait_for(record.id[:10], "finished", "step 40")
        assert re.search(r"finished\s+\S+\s+40\s+0\.0250", screen), screen  # step 40, loss 1/40
    finally:
        reopened.kill()
