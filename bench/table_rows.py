"""What a sample costs a table whose every row moved: ``update_cells`` on each of N rows (two cells each, as a
process's SM% and memory), headless, after the table was drawn.

A changed cell drops its row's drawn cells; found by a walk of every cached key, that cost grew with the table
(issue 35: 40 ms a sample for 256 processes). Prints ms per sample for each N (the update alone, then with the
frame that draws it: main-thread CPU) and the caches' sizes. ``--way``: ``kept``, gpumon's table
(textual_private/table.py); ``fallback``, the same where DataTable's private parts were found moved (its own
drawing); ``textual``, a plain DataTable updated cell by cell through its public ``update_cell``.

Usage: PYTHONPATH=. python bench/table_rows.py [--rows 8 64 256] [--ticks 30] [--way kept|fallback|textual]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gpumon.tui.textual_private.table import KeptCellsTable
from gpumon.tui.widgets.keyed_table import RowTable, SortCell


class Table(App[None]):
    def __init__(self, way: str) -> None:
        super().__init__()
        self.way = way

    def compose(self) -> ComposeResult:
        yield DataTable(cursor_type="row") if self.way == "textual" else RowTable(cursor_type="row")


def update(table: DataTable[object], key: str, values: dict[str, SortCell]) -> None:
    if isinstance(table, RowTable):
        table.update_cells(key, values)
    else:
        for column, value in values.items():
            table.update_cell(key, column, value)


async def sample_ms(rows: int, ticks: int, way: str = "kept") -> tuple[float, float, int]:
    KeptCellsTable._own_cells = way == "kept"
    app = Table(way)
    async with app.run_test(size=(120, 80)) as pilot:
        table: DataTable[object] = app.query_one(DataTable)
        for key in "abcdefg":
            table.add_column(key, key=key, width=8)
        for i in range(rows):
            table.add_row(*(SortCell(i, Text(str(i))) for _ in range(7)), key=str(i))
        await pilot.pause()
        took: list[float] = []
        whole: list[float] = []
        for tick in range(ticks):
            started = time.thread_time()
            for i in range(rows):
                update(table, str(i), {"d": SortCell(tick, Text(str(tick))), "e": SortCell(tick, Text(f"{tick}%"))})
            took.append((time.thread_time() - started) * 1000)
            await pilot.pause()  # drawn, as after a sample
            whole.append((time.thread_time() - started) * 1000)
        cached = len(table._cell_render_cache)  # (a bench may read DataTable's cache: it counts, it relies on nothing)
        return statistics.median(took[ticks // 3 :]), statistics.median(whole[ticks // 3 :]), cached


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--way", choices=("kept", "fallback", "textual"), default="kept")
    args = parser.parse_args()
    for rows in args.rows:
        ms, framed, cached = asyncio.run(sample_ms(rows, args.ticks, args.way))
        print(f"{rows:5d} rows: {ms:6.2f} ms a sample, {framed:6.2f} with its frame (medians), {cached} cells cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
