"""A full state dir mid-run: training goes on, gpumon says why telemetry stopped, and the end is written at once."""

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
from tests.tmpfs import small_tmpfs

FILLER = """
import time
from gpumon import telemetry
for step in range(1, 401):
    telemetry.log(step=step, loss=1.0 / step)
    telemetry.note("x" * 2000)  # fills the state dir's small filesystem
    time.sleep(0.005)
open(__file__ + ".done", "w").write("trained")  # on the test's own disk, not the full one
"""


@pytest.fixture
def small_state_dir(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "state") as mount:
        yield mount


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=60)


def test_a_full_state_dir_stops_telemetry_not_training_and_the_end_waits_for_space(
    small_state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(small_state_dir))
    script = tmp_path / "filler.py"
    script.write_text(FILLER)
    store = RunStore()
    free = os.statvfs(small_state_dir).f_bavail * os.statvfs(small_state_dir).f_frsize
    filler = small_state_dir / "filler"
    filler.write_bytes(b"\0" * (free - 300 * 1024))  # what else the user keeps there: 300 KiB left for gpumon
    record = launch(RunSpec(kind="script", program=str(script)), store, 0)
    deadline = time.monotonic() + 60
    while not Path(str(script) + ".done").exists():  # training ran to its end although the disk filled up
        assert time.monotonic() < deadline, "the training did not finish"
        time.sleep(0.2)
    live = store.load(record.dir)
    listed = gpumon("runs")
    assert "state dir full" in listed.stderr
    if live is not None and live.live and (after := store.load(record.dir)) is not None and after.live:
        assert "training goes on" in listed.stderr, listed.stderr
    else:  # the script's last line is its end: the run may have ended (its end written in the reserve)
        assert "training goes on" in listed.stderr or "new runs cannot start" in listed.stderr, listed.stderr
    assert record.id in listed.stdout
    # The disk is still full: the end is written at once all the same, in the room the supervisor kept for it
    # (reserve.py), not 'running' until space comes back.
    deadline = time.monotonic() + 30
    while (final := store.load(record.dir)) is None or final.status.get("state") != "finished":
        assert time.monotonic() < deadline, f"the end was not written on the full disk: {final and final.status}"
        time.sleep(0.5)
    assert final.exit_code == 0
    filler.unlink()  # the user frees space
    assert "state dir full" not in gpumon("runs").stderr
