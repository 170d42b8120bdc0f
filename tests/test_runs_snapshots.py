"""SVG snapshots of the Runs view with recorded, ended runs (fixed times: nothing depends on the clock).

Update after an intended change of the look: pytest tests/test_runs_snapshots.py --snapshot-update
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpumon.tui.app import GpumonApp
from gpumon.tui.views.runs.launch_form import LaunchForm
from gpumon.tui.views.runs.run_command import RunCommand
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.widgets.log_view import LogView
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import FAILED, FINISHED, record_runs, screen_text


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    # The recorded CPU runs' heaps grow (a leak): fix the host memory their run-out projection uses.
    monkeypatch.setattr("gpumon.core.doctor.leak.host_memory", lambda: 128 * 1024**3)
    record_runs(tmp_path, live=False)
    return tmp_path


def runs_view_on(run_id: str) -> Callable[[Pilot[None]], Awaitable[None]]:
    """Open the Runs view, select ``run_id`` and wait until its log has been read."""

    async def run_before(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, GpumonApp)
        await pilot.press("r")
        table = app.query_one(RunTable)
        log = app.query_one(LogView)
        deadline = time.monotonic() + 10
        while table.row_count < 3:
            assert time.monotonic() < deadline, "the runs never showed"
            await pilot.pause(0.05)
        table.select_run(run_id)
        while app.query_one(RunsView).selected_id != run_id or not log.lines:  # a new selection clears the log first
            assert time.monotonic() < deadline, "the run's log never showed"
            await pilot.pause(0.05)
        command = app.query_one(RunCommand)
        while not str(command.render()):  # read on a thread
            assert time.monotonic() < deadline, "the run's command never showed"
            await pilot.pause(0.05)
        # drawn before the snapshot (a fixed 0.2 s beside CPU hogs may end first): the command and the log's
        # last line on screen
        last = next((line.strip()[:20] for line in reversed(log.lines) if line.strip()), "")
        await drawn(pilot, str(command.render()).strip()[:20], last)

    return run_before


async def drawn(pilot: Pilot[None], *parts: str) -> None:
    """Wait until each of ``parts`` is on screen; not in time, the snapshot says what differs."""
    with contextlib.suppress(AssertionError):
        await pilot_until(pilot, lambda: all(part in screen_text(pilot.app) for part in parts), timeout=30)


def test_runs_view_failed_run_120x40(snap_compare, home: Path) -> None:
    assert snap_compare(make_app(gpus=2), terminal_size=(120, 40), run_before=runs_view_on(FAILED))


def test_runs_view_two_ranks_80x24(snap_compare, home: Path) -> None:
    assert snap_compare(make_app(gpus=2), terminal_size=(80, 24), run_before=runs_view_on(FINISHED))


def test_launch_form_80x24(snap_compare, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the GPUs field's hint reads the same on any machine
    monkeypatch.setattr("os.cpu_count", lambda: 8)  # and ddp's processes on a CPU: 2

    async def open_form(pilot: Pilot[None]) -> None:
        await runs_view_on(FINISHED)(pilot)
        await pilot.press("n")
        deadline = time.monotonic() + 10
        while not isinstance(pilot.app.screen, LaunchForm) or not pilot.app.screen.query("#program-hint"):
            assert time.monotonic() < deadline, "the form never showed"
            await pilot.pause(0.05)
        form = pilot.app.screen
        await drawn(pilot, str(form.query_one("#program-hint").render()).strip()[:20])

    assert snap_compare(make_app(gpus=2), terminal_size=(80, 24), run_before=open_form)
