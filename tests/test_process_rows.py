"""The process table at rest (issue 35): what one sample's changed process costs the table.

A process's SM% and memory both move at most samples; each changed cell dropped its row's caches, looked up the
row's region and repainted it on its own, so a row with two changed cells was repainted twice each second."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.format import num, size
from gpumon.tui.feeds import SampleReady
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app, pilot_until


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    return tmp_path


def shown(table: ProcessTable, key: str, column: str) -> str:
    return table.get_cell(key, column).text.plain


async def test_a_process_whose_cells_moved_repaints_its_row_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count > 0 and table.column_set != ())
        await pilot.pause(0.3)
        refreshed: list[int] = []
        refresh_row = ProcessTable.refresh_row

        def counted(self: ProcessTable, row_index: int) -> Any:
            refreshed.append(row_index)
            return refresh_row(self, row_index)

        monkeypatch.setattr(ProcessTable, "refresh_row", counted)
        snap = app.context.snapshot
        assert snap is not None
        gpu0 = snap.gpu.devices[0]
        top = max(gpu0.processes, key=lambda p: p.used_memory or 0)  # the first row (sorted by memory): stays first
        moved = replace(top, sm_util=(top.sm_util or 0) + 7, used_memory=(top.used_memory or 0) + 3 * 1024**3)
        processes = tuple(moved if p is top else p for p in gpu0.processes)
        devices = (replace(gpu0, processes=processes), *snap.gpu.devices[1:])
        app.post_message(SampleReady(replace(snap, gpu=replace(snap.gpu, devices=devices))))
        key = f"0:{top.pid}"
        await pilot_until(pilot, lambda: shown(table, key, "sm") == num(moved.sm_util))
        await pilot.pause(0.1)
        assert shown(table, key, "mem") == size(moved.used_memory)  # both cells are the new values
        assert refreshed == [table.get_row_index(key)]  # its row repainted once (twice, cell by cell, before)
        assert table.get_row_index(key) == 0
