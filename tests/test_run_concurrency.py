"""Two readers (the apps' runs feeds) and the CLI on one state dir while 4 runs start and end."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpumon.core.events import EventReader
from gpumon.core.runs.reading.monitor import RunsMonitor
from gpumon.core.runs.record.index import RunIndex
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunStore
from gpumon.core.runs.supervision.launcher import launch, wait
from tests.test_launcher import wait_for

STEPS = 300
LOGGER = f"""
import time
from gpumon import telemetry
for step in range(1, {STEPS} + 1):
    telemetry.log(step=step, loss=1.0 / step)
    time.sleep(0.002)
"""


def test_two_feeds_and_the_cli_lose_no_event_and_keep_the_index_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUMON_STEP_RATE", "0")  # every logged step is an event: the test counts them all
    script = tmp_path / "logger.py"
    script.write_text(LOGGER)
    store = RunStore()
    stop = threading.Event()
    seen: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def feed(n: int) -> None:  # what each open app's runs worker does, every 50 ms instead of every second
        monitor = RunsMonitor(RunStore(), adopt=True)
        try:
            while not stop.is_set():
                seen[n] = [s.state for s in monitor.refresh()]
                stop.wait(0.05)
        except BaseException as err:  # noqa: BLE001 - reported by the test below
            errors.append(err)

    feeds = [threading.Thread(target=feed, args=(n,)) for n in range(2)]
    for thread in feeds:
        thread.start()
    try:
        records = [launch(RunSpec(kind="script", program=str(script)), store, 0) for _ in range(4)]
        listings = []
        while any(r.live for r in (store.load(rec.dir) or rec for rec in records)):
            out = subprocess.run([sys.executable, "-m", "gpumon", "runs", "--json"], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            listings.append(json.loads(out.stdout))
        finals = [wait(r, store, timeout=60) for r in records]
        # The end state is written before the supervisor indexes the run: the index is whole once they are gone.
        wait_for(lambda: not any(f.supervisor_alive() for f in finals), timeout=60)
    finally:
        stop.set()
        for thread in feeds:
            thread.join()
    assert errors == []
    assert all(f.state == "finished" for f in finals) and listings
    for final in finals:
        steps = [e["step"] for e in EventReader(final.dir).poll() if e["type"] == "metrics"]
        assert steps == list(range(1, STEPS + 1))  # no event lost
    rows = RunIndex(store.root).rows()
    assert {r.id for r in finals} <= set(rows)
    assert all(rows[r.id]["status"]["state"] == "finished" and rows[r.id]["step"] == STEPS for r in finals)
    with sqlite3.connect(store.root / "index.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert {s.step for s in RunsMonitor(store).refresh()} == {STEPS}  # a fresh reader agrees


def test_a_run_folder_listed_before_its_files_is_read_once_they_are_written(tmp_path: Path, monkeypatch) -> None:
    """The launcher makes the folder, then writes its spec: a reader that lists in between must still see
    the run, although the runs folder's mtime does not change again (a fleet stream missed such a run)."""
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    script = tmp_path / "quick.py"
    script.write_text("print('ok')\n")
    store = RunStore()
    first = wait(launch(RunSpec("script", program=str(script)), store, 0), store, timeout=60)
    assert first.state == "finished"
    monitor = RunsMonitor(store, adopt=False)
    assert [s.id for s in monitor.refresh()] == [first.id]
    made = store.runs_dir / "script-1124-000000-beef"
    made.mkdir(mode=0o700)  # as store.new_run_dir does, before spec.json and status.json
    assert [s.id for s in monitor.refresh()] == [first.id]
    stamp = store.runs_dir.stat().st_mtime_ns
    for name in ("spec.json", "status.json"):
        (made / name).write_bytes((first.dir / name).read_bytes())
    assert store.runs_dir.stat().st_mtime_ns == stamp  # nothing tells the reader to list again
    assert made.name in [s.id for s in monitor.refresh()]


OTHER_WRITER = """
import sys
from pathlib import Path
from gpumon.core.runs.record.index import RunIndex
index = RunIndex(Path(sys.argv[1]))
index.put([(sys.argv[2], 2.0, {"n": 2})])
index.close()  # the last connection it knows of: SQLite checkpoints and deletes the -wal and -shm
"""


def test_a_second_index_in_one_process_leaves_every_writers_rows_readable(tmp_path: Path) -> None:
    """Opening the index again in a process that has it open (two feeds, a listing beside a reader) once
    closed a descriptor of the file, which drops every POSIX lock the process held on it: a supervisor's
    writer then closed as if last and deleted the -wal and -shm under the open connection, whose next rows
    went where no new reader looks ("disk I/O error": CI saw an index with no row of four ended runs)."""

    def other(run_id: str) -> None:  # a supervisor indexing its run's end
        done = subprocess.run([sys.executable, "-c", OTHER_WRITER, str(tmp_path), run_id], capture_output=True)
        assert done.returncode == 0, done.stderr

    first = RunIndex(tmp_path)
    first.put([("mine", 1.0, {"n": 1})])
    assert set(RunIndex(tmp_path).rows()) == {"mine"}  # a second reader in this process
    other("theirs")
    first.put([("mine2", 1.0, {"n": 1})])
    other("theirs2")
    assert set(RunIndex(tmp_path).rows()) == {"mine", "mine2", "theirs", "theirs2"}  # a new reader sees them all
    with sqlite3.connect(tmp_path / "index.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert os.stat(tmp_path / "index.sqlite3").st_mode & 0o077 == 0
    os.chmod(tmp_path / "index.sqlite3", 0o644)
    assert set(RunIndex(tmp_path).rows()) == {"mine", "mine2", "theirs", "theirs2"}
    assert os.stat(tmp_path / "index.sqlite3").st_mode & 0o777 == 0o600  # made private again, not opened
