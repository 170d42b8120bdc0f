"""Two readers (the apps' runs feeds) and the CLI on one state dir while 4 runs start and end."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpumon.core.events import EventReader
from gpumon.core.runs.index import RunIndex
from gpumon.core.runs.launcher import launch, wait
from gpumon.core.runs.monitor import RunsMonitor
from gpumon.core.runs.spec import RunSpec
from gpumon.core.runs.store import RunStore

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
