"""A full state dir seen from the commands: a launch leaves nothing half-made, no command sets the run index aside
as 'unreadable' (a full disk is not a corrupt index), and nothing speaks of training when nothing trains."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunStore
from gpumon.core.runs.supervision.launcher import launch
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


def test_a_two_process_ddp_run_on_a_full_state_dir_says_what_each_rank_dropped(state: Path) -> None:
    """The built-in DDP trainer under torchrun, 2 ranks: each rank's output goes through its FIFO to the runner,
    which counts what the full disk refused per log (before: rank0.log empty, with no note)."""
    pytest.importorskip("torch")
    fill(state, 192 * 1024)  # room for the launch (its files, the end reserve), then nothing
    args = ("--epochs", "1", "--log-every", "1", "--max-steps", "40", "--no-checkpoint")
    record = launch(RunSpec(kind="ddp", nproc=2, args=args), RunStore(), 0, wait_s=30)
    fill(state, 0, "more")  # full before the ranks import torch
    store = RunStore()
    deadline = time.monotonic() + 240
    while (final := store.load(record.dir)) is None or final.live:
        assert time.monotonic() < deadline, f"the run did not end: {final and final.status}"
        time.sleep(0.2)
    assert final.state == "finished" and final.exit_code == 0, final.status
    dropped = final.status.get("output_dropped")
    assert isinstance(dropped, dict) and dropped.get("rank0.log", 0) > 0, final.status
    log = (record.dir / "logs" / "rank0.log").read_text()
    assert log.rstrip().splitlines()[-1].startswith("[gpumon: ") and "dropped" in log, log
    shown = gpumon("logs", record.id)  # the log view says it too
    assert "of output dropped here" in shown.stdout and "state dir was full" in shown.stdout, shown
    told = gpumon("doctor", record.id)
    assert "output dropped: the state dir was full" in told.stdout and "rank0.log" in told.stdout, told


GATED_PRINTER = """
import os, sys, time
end = time.monotonic() + 600  # a test that failed before its gate never leaves this run behind for good
while not os.path.exists(sys.argv[1]) and time.monotonic() < end:  # the test opens it once the run is adopted
    time.sleep(0.05)
print("first line", flush=True)
for i in range(400):
    print(f"line {i} " + "x" * 3000, flush=True)  # ~1.2 MB: more than the state dir has
print("last line", flush=True)
"""


@pytest.mark.parametrize("runner_too", [False, True], ids=["runner-lives", "runner-killed"])
def test_an_adopted_run_on_a_full_state_dir_reads_its_end_and_counts_its_drops(
    state: Path, tmp_path: Path, runner_too: bool
) -> None:
    """The adopter ends a run as its supervisor would: its end in the reserve (not 'running' until space comes
    back), the bytes dropped per log in the status (the runner's count from exit.json, or its own drain's), and
    the drop said in the log (before: no count, no note, and the end waited for space)."""
    import signal

    from gpumon.core.runs.reading.monitor import RunsMonitor

    script, gate = tmp_path / "gated.py", tmp_path / "gate"
    script.write_text(GATED_PRINTER)
    fill(state, 256 * 1024)
    store = RunStore()
    record = launch(RunSpec(kind="script", program=str(script), args=(str(gate),)), store, 0)
    deadline = time.monotonic() + 30
    while not (record := store.load(record.dir) or record).status.get("runner_pid"):
        assert time.monotonic() < deadline, record.status
        time.sleep(0.05)
    os.kill(int(record.status["supervisor_pid"]), signal.SIGKILL)
    if runner_too:
        os.kill(int(record.status["runner_pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (loaded := store.load(record.dir)) is None or loaded.state != "unsupervised":
        assert time.monotonic() < deadline, loaded and loaded.status
        time.sleep(0.1)
    RunsMonitor(store, adopt=True).refresh()
    while "adopted" not in (store.load(record.dir) or record).status:
        assert time.monotonic() < deadline, "not adopted"
        time.sleep(0.1)
    fill(state, 0, "more")
    gate.write_text("go")
    deadline = time.monotonic() + 120
    while (final := store.load(record.dir)) is None or final.live:
        assert time.monotonic() < deadline, f"the adopted run did not end on the full disk: {final and final.status}"
        time.sleep(0.2)
    assert final.state == ("exited" if runner_too else "finished"), final.status
    dropped = final.status.get("output_dropped")
    assert isinstance(dropped, dict) and dropped.get("rank0.log", 0) > 100_000, final.status
    log = (record.dir / "logs" / "rank0.log").read_text()
    assert log.rstrip().splitlines()[-1].startswith("[gpumon: ") and "dropped" in log.rstrip().splitlines()[-1]
    told = gpumon("doctor", record.id)
    assert "output dropped: the state dir was full" in told.stdout, told
