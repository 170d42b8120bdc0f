"""The small faults an operator meets (issue 34, item 10): prune that says what it did, a damaged status that
keeps its place and says so, folders that stay 0700 whoever makes them, and Ctrl-C at start. Real CLI
processes and real runs."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from tests.conftest import wait_ended, wait_until
from tests.faults.test_liveness import lock_free, rows, start, supervisor_of

Gpumon = Callable[..., CompletedProcess[str]]


def test_prune_removes_an_ended_run_whose_status_was_emptied_and_says_what_it_removed(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    script = tmp_path / "quick.py"
    script.write_text("print('done')\n")
    run_id = gpumon("launch", "script", str(script)).stdout.split()[-1]
    wait_ended(tmp_path / "home", run_id, timeout=60)  # read here, then listed once as before
    assert rows(gpumon)[run_id]["status"] == "finished"
    run_dir = tmp_path / "home" / "runs" / run_id
    assert wait_until(lambda: lock_free(run_dir), timeout=30)
    (run_dir / "status.json").write_text("")
    done = gpumon("prune", "--keep", "0", "--yes")
    assert done.returncode == 0, done.stderr
    assert not run_dir.exists(), done.stdout  # before: "removed the 1 runs above", and nothing was removed
    assert "removed the 1 run above" in done.stdout
    assert run_id not in rows(gpumon)


def test_prune_says_which_run_it_kept_and_why(gpumon: Gpumon, tmp_path: Path) -> None:
    """A run whose status says it ended while its supervisor still holds it: kept, and said so."""
    run_id, run_dir = start(gpumon, tmp_path)
    supervisor = supervisor_of(run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    from gpumon.core.runs.record.index import RunIndex
    from gpumon.core.runs.record.prune import Candidate, apply
    from gpumon.core.runs.record.store import RunStore

    (run_dir / "status.json").write_text(json.dumps({**status, "state": "finished", "ended": 1.0}))
    outcome = apply(RunStore(tmp_path / "home"), [Candidate(run_id, run_dir, 1.0, 10)], events_only=False)
    RunIndex(tmp_path / "home").close()
    assert outcome.removed == [] and run_dir.is_dir()
    assert outcome.kept[0][1] == f"its supervisor (pid {supervisor.pid}) holds it"
    assert gpumon("stop", run_id).returncode == 0


def test_a_live_run_with_an_emptied_status_keeps_its_place_and_times_and_is_noted(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    older = tmp_path / "older.py"
    older.write_text("print('old')\n")
    old_id = gpumon("launch", "script", str(older)).stdout.split()[-1]
    wait_ended(tmp_path / "home", old_id, timeout=60)
    assert rows(gpumon)[old_id]["status"] == "finished"
    run_id, run_dir = start(gpumon, tmp_path)
    (run_dir / "status.json").write_text("")
    done = gpumon("runs")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    table = [line for line in lines[1:] if line.split() and line.split()[0] in (run_id, old_id)]
    assert table[0].split()[0] == run_id, done.stdout  # newest first: before, at the bottom (created 0)
    assert "N/A" not in table[0], table[0]  # its elapsed time, from when its supervisor started
    assert f"{run_id} running: unreadable: status.json is empty" in done.stdout
    assert gpumon("stop", run_id).returncode == 0


def test_folders_made_under_a_run_are_0700_parents_included(tmp_path: Path) -> None:
    """A run dir moved away under a live run was recreated 0755 by a process making events/ inside it."""
    from gpumon.core.events import EventWriter

    run_dir = tmp_path / "home" / "runs" / "moved-away"
    EventWriter(run_dir, "rank0").write("note", text="x")
    for folder in (tmp_path / "home", tmp_path / "home" / "runs", run_dir, run_dir / "events"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_the_ddp_trainers_checkpoints_are_0700(gpumon: Gpumon, tmp_path: Path) -> None:
    done = gpumon("launch", "ddp", "--nproc", "1", "--", "--epochs", "1", "--max-steps", "3")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    # the run's end read here (a DDP run: ~30 `gpumon runs` polls before), then listed once
    wait_ended(tmp_path / "home", run_id, timeout=120)
    assert rows(gpumon)[run_id]["status"] == "finished", rows(gpumon)[run_id]
    folder = tmp_path / "home" / "runs" / run_id / "checkpoints"
    assert list(folder.glob("epoch*.pt")), "the trainer saved no checkpoint"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


# Sends SIGINT to itself when gpumon imports ``AT``: Ctrl-C at that instant of gpumon's start, whatever the load.
_INTERRUPTED = """
import importlib.abc, os, runpy, signal, sys

AT = sys.argv[1]

class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == AT:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["gpumon", *sys.argv[2:]]
runpy.run_module("gpumon", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    "at", ["gpumon.cli.runs", "gpumon.cli.parser", "gpumon.core.runs.record.store", "gpumon.core.format"]
)
def test_ctrl_c_while_gpumon_starts_exits_130_without_a_traceback(tmp_path: Path, at: str) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(_INTERRUPTED)
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, str(script), at, "runs"], env=env, capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)


def test_ctrl_c_after_start_still_reaches_the_command(gpumon: Gpumon, tmp_path: Path) -> None:
    """``gpumon logs --follow`` ends on Ctrl-C with 130, as before: the quiet start handler is gone by then."""
    script = tmp_path / "talk.py"
    script.write_text("import time\nfor i in range(600):\n    print(i, flush=True)\n    time.sleep(0.1)\n")
    run_id = gpumon("launch", "script", str(script)).stdout.split()[-1]
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}
    follow = subprocess.Popen(
        [sys.executable, "-m", "gpumon", "logs", run_id, "--follow"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline().strip()  # it follows: past its start
        follow.send_signal(signal.SIGINT)
        _, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
        gpumon("stop", run_id)
    assert "Traceback" not in err, err
    assert follow.returncode in (0, 130), (follow.returncode, err)
