"""Issue 26, point 3: the app's Alerts view lists every run's alerts, counts the unread in the top bar, and Enter
opens the alert's run in the Runs view. Real runs; the alert texts are the scripts' own (brackets included)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunStore
from gpumon.core.runs.supervision.launcher import launch, wait
from gpumon.tui.views.alerts.view import AlertsView
from tests.conftest import make_app, pilot_until, wait_until


def test_the_alerts_view_counts_unread_alerts_and_opens_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(tmp_path / "cfg"))  # no [alerts]: recorded, sent nowhere
    store = RunStore()
    ids = []
    for n, why in enumerate(["[red]corrupt[/] shard 3", "no such file data.csv"]):
        script = tmp_path / f"fails{n}.py"
        script.write_text(f"import sys\nsys.exit({why!r})\n")
        record = launch(RunSpec(kind="script", program=str(script)), store, 0)
        wait(record, store, timeout=90)  # one after the other: their alerts' order is known
        assert wait_until(lambda r=record: (r.dir / "alerts.jsonl").exists(), timeout=60)
        ids.append(record.id)

    async def drive() -> None:
        app = make_app(gpus=1)
        async with app.run_test(size=(120, 40)) as pilot:
            top = app.query_one("#top-alerts", Static)
            with contextlib.suppress(AssertionError):  # said by the assertion below (100 pauses of 0.1 s before)
                await pilot_until(pilot, lambda: "2 unread alerts" in str(top.render()))
            assert "2 unread alerts" in str(top.render())
            await pilot.press("alt+a")
            await pilot_until(pilot, lambda: app.view == "alerts")
            table = app.query_one("#alert-table", DataTable)
            rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
            assert [r[1] for r in rows] == ids[::-1]  # newest on top
            assert rows[1][2:4] == ["failed", "no channel"]  # the detail says: sent nowhere
            # the doctor's headline (the script's words, literally) and its first fix, whole in the alert,
            # its cell cut to the table's width with an ellipsis
            text = app.query_one(AlertsView).entries[1].text
            assert text.startswith("failed: the script exited with status 1: [red]corrupt[/] shard 3. Fix: ")
            assert text.endswith(f"its last lines say why: gpumon logs {rows[1][1]}")  # a command that runs
            assert rows[1][4].endswith("…") and text.startswith(rows[1][4][:-1])
            with contextlib.suppress(AssertionError):  # looking at them marks them read; said below
                await pilot_until(pilot, lambda: str(top.render()).strip() == "")
            assert str(top.render()).strip() == ""
            detail = str(app.query_one("#alert-detail", Static).render())
            assert "sent nowhere: no channel in [alerts] picks this kind" in detail
            await pilot.press("down", "enter")
            with contextlib.suppress(AssertionError):  # said by the assertion below
                await pilot_until(pilot, lambda: app.view == "runs" and app.context.selected_run == ids[0], timeout=30)
            assert app.view == "runs" and app.context.selected_run == ids[0]

    asyncio.run(drive())
    assert sys.executable  # the runs ended on their own: nothing left to stop
