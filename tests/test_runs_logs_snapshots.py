"""SVG snapshots of the full-screen log (a search shown) and of two runs compared on a log axis.

Update after an intended change of the look: pytest tests/test_runs_logs_snapshots.py --snapshot-update
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpumon.core.events import EventWriter
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import write_json
from gpumon.tui.views.runs.compare import CompareScreen
from gpumon.tui.views.runs.log_screen import LogScreen
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.widgets.charts import Chart
from tests.conftest import make_app
from tests.test_runs_logs import SEARCHED, record_searchable
from tests.test_runs_view import FINISHED, T0, record_runs, screen_text

STEEP = "ddp-1121-104000-f4f4"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setattr("gpumon.core.doctor.leak.host_memory", lambda: 128 * 1024**3)
    record_runs(tmp_path, live=False)
    record_searchable(tmp_path)
    run_dir = tmp_path / "runs" / STEEP  # a loss from 4.2 to 0.02: flat in linear, readable in log
    (run_dir / "logs").mkdir(parents=True)
    write_json(run_dir / "spec.json", RunSpec("ddp", nproc=1, cwd="/tmp", name="lr-3e-3").to_dict())
    write_json(run_dir / "status.json", {"state": "finished", "created": T0 + 2000, "started": T0 + 2001,
                                         "ended": T0 + 2100, "exit_code": 0})  # fmt: skip
    writer = EventWriter(run_dir, "rank0")
    writer.write("proc_start", rank=0)
    for step in range(1, 301):
        writer.write("metrics", step=step, metrics={"loss": 4.2 * math.exp(-step / 30) + 0.02})
    writer.close()
    return tmp_path


async def wait(pilot: Pilot[None], predicate: Callable[[], object]) -> None:
    deadline = time.monotonic() + 15
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


async def select(pilot: Pilot[None], run_id: str) -> None:
    table = pilot.app.query_one(RunTable)
    await wait(pilot, lambda: table.row_count == 5)
    table.select_run(run_id)
    await wait(pilot, lambda: pilot.app.query_one(RunsView).selected_id == run_id)


def log_searched() -> Callable[[Pilot[None]], Awaitable[None]]:
    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.press("r")
        await select(pilot, SEARCHED)
        await pilot.press("o")
        await wait(pilot, lambda: isinstance(pilot.app.screen, LogScreen))
        await pilot.press("slash", *"checkpoint", "enter", "N")
        status = pilot.app.screen.query_one("#log-status")
        await wait(pilot, lambda: "match 5 of 6" in str(status.render()))
        await wait(pilot, lambda: "match 5 of 6" in screen_text(pilot.app))  # drawn before the snapshot

    return run_before


def compared_on_a_log_axis() -> Callable[[Pilot[None]], Awaitable[None]]:
    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.press("r")
        await select(pilot, FINISHED)
        await pilot.press("space")
        await select(pilot, STEEP)
        await pilot.press("space", "c")
        await wait(pilot, lambda: isinstance(pilot.app.screen, CompareScreen))
        chart = pilot.app.screen.query_one("#compare-chart", Chart)
        await wait(pilot, lambda: len(chart.series) == 2)
        await pilot.press("y")
        await wait(pilot, lambda: "loss / step · log y" in screen_text(pilot.app))  # drawn before the snapshot

    return run_before


def test_full_screen_log_with_a_search_100x30(snap_compare, home: Path) -> None:
    assert snap_compare(make_app(gpus=1), terminal_size=(100, 30), run_before=log_searched())


def test_two_runs_compared_on_a_log_axis_120x40(snap_compare, home: Path) -> None:
    assert snap_compare(make_app(gpus=1), terminal_size=(120, 40), run_before=compared_on_a_log_axis())
