"""A full state dir seen from the commands: a launch leaves nothing half-made, no command sets the run index aside
as 'unreadable' (a full disk is not a corrupt index), and nothing speaks of training when nothing trains."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.runs.launcher import launch
from gpumon.core.runs.spec import RunSpec
from gpumon.core.runs.store import RunStore
from tests.tmpfs import fill, small_tmpfs


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "state") as mount:
        monkeypatch.setenv("GPUMON_HOME", str(mount))
        yield mount


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=120)


def run_to_end(store: RunStore, script: Path) -> str:
    record = launch(RunSpec(kind="script", program=str(script)), store, 0)
    deadline = time.monotonic() + 60
    while (loaded := store.load(record.dir)) is None or loaded.live:
        assert time.monotonic() < deadline, f"the run did not end: {loaded and loaded.status}"
        time.sleep(0.1)
    assert loaded.state == "finished", loaded.status
    return record.id


@pytest.mark.parametrize("leave", [0, 4096, 12 * 1024])
def test_a_launch_onto_a_full_state_dir_leaves_no_half_made_run(state: Path, tmp_path: Path, leave: int) -> None:
    script = tmp_path / "hi.py"
    script.write_text("print('hi')\n")
    assert gpumon("runs").returncode == 0  # the state dir and its index exist, as on a server in use
    fill(state, leave)
    done = gpumon("launch", "script", str(script))
    assert done.returncode == 2, done
    assert done.stderr.strip().count("\n") == 0 and "No space left on device" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert list((state / "runs").iterdir()) == []  # before: a run dir with logs/ (and maybe spec.json) only
    listed = gpumon("runs")
    assert listed.returncode == 0 and "no runs yet" in listed.stdout, listed


def test_no_command_rebuilds_the_index_on_a_full_state_dir_and_nothing_is_lost(state: Path, tmp_path: Path) -> None:
    script = tmp_path / "hi.py"
    script.write_text("print('hi')\n")
    store = RunStore()
    ids = [run_to_end(store, script) for _ in range(3)]
    (state / "index.sqlite3").unlink()  # older runs with no row: readers write rows, into a full disk
    for suffix in ("-wal", "-shm"):
        (state / f"index.sqlite3{suffix}").unlink(missing_ok=True)
    assert gpumon("runs").returncode == 0
    ids.append(run_to_end(store, script))  # and one the index has not seen yet
    fill(state)
    for args in (("runs",), ("runs", "--json"), ("doctor", ids[-1]), ("logs", ids[0]), ("queue",), ("prune",)):
        done = gpumon(*args)
        said = done.stdout + done.stderr
        assert "rebuilt" not in said and "unreadable" not in done.stderr and "Traceback" not in said, (args, said)
        if args[0] == "runs":
            assert all(run_id in done.stdout for run_id in ids), (args, done.stdout)
    assert not (state / "index.sqlite3.unreadable").exists()
    (state / "filler").unlink()
    listed = gpumon("runs")
    assert all(run_id in listed.stdout for run_id in ids) and "rebuilt" not in listed.stderr, listed


def test_a_full_state_dir_with_no_live_run_says_no_training_goes_on(state: Path, tmp_path: Path) -> None:
    script = tmp_path / "hi.py"
    script.write_text("print('hi')\n")
    run_id = run_to_end(RunStore(), script)
    fill(state)
    for args in (("runs",), ("doctor", run_id)):
        done = gpumon(*args)
        said = done.stdout + done.stderr
        assert "state dir full" in said, (args, said)  # still said: a launch would fail
        assert "training goes on" not in said and "telemetry stopped" not in said, (args, said)
        assert "new runs cannot start" in said, (args, said)
