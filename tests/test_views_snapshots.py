"""SVG snapshots of every view at 80x24, 120x40 and 200x50 (issue 35: nothing cut, or a cut that says so).

Four simulated GPUs, a frozen host, recorded runs, an ended experiment and alerts at fixed times, TZ=UTC:
nothing depends on the clock or on this machine. Each snapshot waits until its view's data is on screen.

Update after an intended change of the look: pytest tests/test_views_snapshots.py --snapshot-update
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpumon.tui.app import GpumonApp
from gpumon.tui.views.alerts.view import AlertsView
from gpumon.tui.views.doctor.text import DoctorText
from gpumon.tui.views.runs.run_command import RunCommand
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.views.trials.trial_table import TrialTable
from gpumon.tui.views.trials.view import TrialsView
from gpumon.tui.widgets.log_view import LogView
from tests.conftest import make_app, pilot_until
from tests.fleet_data import StandInFleet, fleet_app, mixed_fleet
from tests.test_runs_view import FAILED, STOPPED

pytestmark = pytest.mark.usefixtures("utc")
SIZES = [(80, 24), (120, 40), (200, 50)]
Drive = Callable[[Pilot[None]], Awaitable[None]]


def app_of(pilot: Pilot[None]) -> GpumonApp:
    assert isinstance(pilot.app, GpumonApp)
    return pilot.app


async def alerts_counted(pilot: Pilot[None]) -> None:
    """The top bar's unread count has come (two alerts after the recorded 'read at')."""
    await pilot_until(pilot, lambda: app_of(pilot)._top_alerts.unread == 2, "the unread alerts were never counted")


async def on_run(pilot: Pilot[None], run_id: str) -> None:
    app = app_of(pilot)
    await pilot.press("r")
    table = app.query_one(RunTable)
    await pilot_until(pilot, lambda: table.row_count >= 4, "the runs never showed")
    log, view = app.query_one(LogView), app.query_one(RunsView)

    def picked() -> bool:  # picked again while the view's first read may still move the cursor to its newest run
        if view.selected_id != run_id:
            table.select_run(run_id)
        return view.selected_id == run_id and bool(log.lines)

    await pilot_until(pilot, picked, "the run was never selected with its log")
    await pilot_until(pilot, lambda: str(app.query_one(RunCommand).render()), "the run's command never showed")


async def gpus(pilot: Pilot[None]) -> None:
    await alerts_counted(pilot)


async def runs(pilot: Pilot[None]) -> None:
    await alerts_counted(pilot)
    await on_run(pilot, STOPPED)


async def trials(pilot: Pilot[None]) -> None:
    await alerts_counted(pilot)
    app = app_of(pilot)
    await pilot.press("t")
    table, view = app.query_one(TrialTable), app.query_one(TrialsView)
    await pilot_until(pilot, lambda: table.row_count >= 6, "the trials never showed")
    table.select_trial("a1b2c_00002")
    await pilot_until(
        pilot,
        lambda: view.snapshot and view.snapshot.curves and view.snapshot.curves.trial_id == "a1b2c_00002",
        "the trial's curve never came",
    )


async def doctor(pilot: Pilot[None]) -> None:
    await alerts_counted(pilot)
    await on_run(pilot, FAILED)
    await pilot.press("d")
    text = app_of(pilot).query_one(DoctorText)
    await pilot_until(pilot, lambda: "what to change" in text.text.plain, "the doctor never diagnosed")


async def alerts(pilot: Pilot[None]) -> None:
    app = app_of(pilot)
    await pilot.press("exclamation_mark")
    view = app.query_one(AlertsView)
    read = lambda: len(view.entries) == 4 and app._top_alerts.unread == 0  # noqa: E731
    await pilot_until(pilot, read, "the alerts were never read")


async def fleet(pilot: Pilot[None]) -> None:
    from gpumon.tui.views.fleet.view import FleetView

    view = app_of(pilot).query_one(FleetView)
    await pilot_until(pilot, lambda: view.state is not None and view._blocks, "the fleet was never drawn")


VIEWS: dict[str, Drive] = {
    "gpus": gpus, "runs": runs, "trials": trials, "doctor": doctor, "alerts": alerts, "fleet": fleet
}  # fmt: skip


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("view", list(VIEWS))
def test_view(snap_compare, views_home: Path, view: str, size: tuple[int, int]) -> None:
    drive = VIEWS[view]

    async def run_before(pilot: Pilot[None]) -> None:
        await drive(pilot)
        # the start's drawing done, nothing still read or laid out (a fixed 0.3 s beside CPU hogs may end before)
        app = app_of(pilot)
        await pilot_until(pilot, lambda: not app.drawing_unseen() and all(w.is_finished for w in app.workers))
        await pilot.pause()

    app = fleet_app(StandInFleet([mixed_fleet()], interval=0)) if view == "fleet" else make_app(gpus=4)
    assert snap_compare(app, terminal_size=size, run_before=run_before)
