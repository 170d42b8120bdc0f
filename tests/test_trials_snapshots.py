"""SVG snapshots of the Trials view with a recorded, ended experiment (fixed times: nothing depends on the clock).

Update after an intended change of the look: pytest tests/test_trials_snapshots.py --snapshot-update
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpumon.tui.app import GpumonApp
from gpumon.tui.views.trials.trial_table import TrialTable
from gpumon.tui.views.trials.view import TrialsView
from gpumon.tui.widgets.charts import Chart
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import screen_text
from tests.trials_data import record_done


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    record_done(tmp_path)
    return tmp_path


def trials_view_on(trial_id: str, *keys: str) -> Callable[[Pilot[None]], Awaitable[None]]:
    """Open the Trials view, select ``trial_id``, wait for its curve, then press ``keys``."""

    async def run_before(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, GpumonApp)
        await pilot.press("t")
        table = app.query_one(TrialTable)
        view = app.query_one(TrialsView)
        deadline = time.monotonic() + 10
        while table.row_count < 6:
            assert time.monotonic() < deadline, "the trials never showed"
            await pilot.pause(0.05)
        table.select_trial(trial_id)
        while view.snapshot is None or view.snapshot.curves is None or view.snapshot.curves.trial_id != trial_id:
            assert time.monotonic() < deadline, "the trial's curve never came"
            await pilot.pause(0.05)
        await pilot.press(*keys)
        # drawn before the snapshot (a fixed 0.2 s beside CPU hogs may end first): the table's sort, and the curve's
        # title naming the trial, on screen
        chart = app.query_one("#trial-chart", Chart)
        shown = lambda: all(  # noqa: E731
            part in screen_text(app) for part in (str(table.border_subtitle), trial_id, str(chart.border_title))
        )
        with contextlib.suppress(AssertionError):  # not all shown in time: the snapshot says what differs
            await pilot_until(pilot, lambda: trial_id in str(chart.border_title) and shown(), timeout=30)

    return run_before


def test_trials_view_failed_trial_120x40(snap_compare, home: Path) -> None:
    assert snap_compare(make_app(gpus=2), terminal_size=(120, 40), run_before=trials_view_on("a1b2c_00002"))


def test_trials_view_sorted_by_loss_80x24(snap_compare, home: Path) -> None:
    run_before = trials_view_on("a1b2c_00001", *["s"] * 6)  # TRIAL, STATUS, 3 parameters, ITER, then loss
    assert snap_compare(make_app(gpus=2), terminal_size=(80, 24), run_before=run_before)
