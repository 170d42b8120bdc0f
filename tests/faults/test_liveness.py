"""A run lives while its supervisor holds its lock or its processes run, whatever its files say: an emptied
or cut status.json or spec.json never makes a training run "lost", prunable or unstoppable. Real runs
through the CLI, files damaged by the test as a full disk or a crash would."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import psutil

from tests.conftest import wait_ended, wait_state, wait_until

Gpumon = Callable[..., CompletedProcess[str]]

SLEEPER = "import time\nfor _ in range(600):\n    time.sleep(0.1)\n"


def rows(gpumon: Gpumon) -> dict[str, dict]:
    done = gpumon("runs", "--json")
    assert done.returncode == 0, done.stderr
    return {r["id"]: r for r in json.loads(done.stdout)["runs"]}


def start(gpumon: Gpumon, tmp_path: Path) -> tuple[str, Path]:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    done = gpumon("launch", "script", str(script))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    run_dir = tmp_path / "home" / "runs" / run_id
    wait_state(run_dir, "running", timeout=60)  # read here: a `gpumon runs` a poll costs ~0.3 CPU-s
    assert rows(gpumon)[run_id]["status"] == "running"  # then listed once while it runs, as before
    return run_id, run_dir


def supervisor_of(run_dir: Path) -> psutil.Process:
    status = json.loads((run_dir / "status.json").read_text())
    return psutil.Process(status["supervisor_pid"])


def test_a_live_run_with_an_emptied_status_stays_running_unprunable_and_stoppable(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    run_id, run_dir = start(gpumon, tmp_path)
    supervisor = supervisor_of(run_dir)
    (run_dir / "status.json").write_text("")  # a full disk or a crash mid-write
    row = rows(gpumon)[run_id]
    assert row["status"] == "running", row
    assert row["unreadable"] == ["status.json is empty"] and "unreadable: status.json is empty" in row["warnings"]
    assert (run_dir / "status.json").read_text() == ""  # listing wrote nothing over it (no "lost")
    assert gpumon("prune", "--keep", "0", "--yes").returncode == 0
    assert run_dir.is_dir() and supervisor.is_running()
    done = gpumon("stop", run_id)
    assert done.returncode == 0 and "stopping" in done.stdout, (done.stdout, done.stderr)
    assert wait_until(lambda: not supervisor.is_running(), timeout=60, step=0.2)
    assert rows(gpumon)[run_id]["status"] == "stopped"  # the supervisor wrote its end from what it knew


def test_a_truncated_status_and_a_truncated_spec_are_said_and_the_run_still_stops(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    run_id, run_dir = start(gpumon, tmp_path)
    supervisor = supervisor_of(run_dir)
    for name in ("status.json", "spec.json"):
        text = (run_dir / name).read_text()
        (run_dir / name).write_text(text[: len(text) // 2])
    row = rows(gpumon)[run_id]
    assert row["status"] == "running", row
    assert "spec.json is not valid JSON (cut short?)" in row["unreadable"]
    assert "status.json is not valid JSON (cut short?)" in row["unreadable"]
    assert row["program"].startswith("unreadable: spec.json")
    done = gpumon("stop", run_id)
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: not supervisor.is_running(), timeout=60, step=0.2)


def test_an_ended_run_whose_status_is_emptied_keeps_what_the_index_knew(gpumon: Gpumon, tmp_path: Path) -> None:
    script = tmp_path / "quick.py"
    script.write_text("print('done')\n")
    run_id = gpumon("launch", "script", str(script)).stdout.split()[-1]
    wait_ended(tmp_path / "home", run_id, timeout=60)
    assert rows(gpumon)[run_id]["status"] == "finished"
    run_dir = tmp_path / "home" / "runs" / run_id
    assert wait_until(lambda: not (run_dir / "supervisor.lock").exists() or lock_free(run_dir), timeout=30)
    (run_dir / "status.json").write_text("")
    assert rows(gpumon)[run_id]["status"] == "finished"
    assert (run_dir / "status.json").read_text() == ""


def test_a_run_whose_supervisor_was_killed_with_a_damaged_status_is_found_by_its_mark(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    run_id, run_dir = start(gpumon, tmp_path)
    supervisor = supervisor_of(run_dir)
    [child] = [p for p in supervisor.children(recursive=True) if "sleeper.py" in " ".join(p.cmdline())]
    (run_dir / "status.json").write_text("{")
    os.kill(supervisor.pid, signal.SIGKILL)
    assert wait_until(lambda: not supervisor.is_running(), timeout=30)
    # no lock and no pid it can read: the script's own process still carries the run's mark
    assert rows(gpumon)[run_id]["status"] in ("unsupervised", "running"), rows(gpumon)[run_id]  # or adopted
    # that listing adopted it: the new supervisor's status says the run runs (it read "starting": no state in {})
    assert wait_until(lambda: adopted(run_dir), timeout=60), "no supervisor adopted the run"
    assert rows(gpumon)[run_id]["status"] == "running", rows(gpumon)[run_id]
    assert gpumon("prune", "--keep", "0", "--yes").returncode == 0 and run_dir.is_dir()
    done = gpumon("stop", run_id)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert wait_until(lambda: not child.is_running(), timeout=60, step=0.2), "the marked process outlived stop"
    kill(child)


def adopted(run_dir: Path) -> bool:
    try:
        return "adopted" in json.loads((run_dir / "status.json").read_text())
    except ValueError:  # still the damaged file
        return False


def lock_free(run_dir: Path) -> bool:
    from gpumon.core.runs.supervision.liveness import lock_holder

    return lock_holder(run_dir) is None


def kill(proc: psutil.Process) -> None:
    try:
        proc.kill()
        proc.wait(10)
    except psutil.Error:
        pass
