"""What a sample costs a table whose every row moved: ``update_cells`` on each of N rows (two cells each, as a
process's SM% and memory), headless, after the table was drawn.

A changed cell drops its row's drawn cells; found by a walk of every cached key, that cost grew with the table
(issue 35: 40 ms a sample for 256 processes). Prints ms per sample for each N and the caches' sizes.

Usage: PYTHONPATH=. python bench/table_rows.py [--rows 8 64 256] [--ticks 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from rich.text import Text
from textual.app import App, ComposeResult

from gpumon.tui.widgets.keyed_table import RowTable, SortCell


class Table(App[None]):
    def compose(self) -> ComposeResult:
        yield RowTable(cursor_type="row")


async def sample_ms(rows: int, ticks: int) -> tuple[float, int]:
    app = Table()
    async with app.run_test(size=(120, 80)) as pilot:
        table = app.query_one(RowTable)
        for key in "abcdefg":
            table.add_column(key, key=key, width=8)
        for i in range(rows):
            table.add_row(*(SortCell(i, Text(str(i))) for _ in range(7)), key=str(i))
        await pilot.pause()
        took: list[float] = []
        for tick in range(ticks):
            started = time.thread_time()
            for i in range(rows):
                table.update_cells(
                    str(i), {"d": SortCell(tick, Text(str(tick))), "e": SortCell(tick, Text(f"{tick}%"))}
                )
            took.append((time.thread_time() - started) * 1000)
            await pilot.pause()  # drawn, as after a sample
        return statistics.median(took[ticks // 3 :]), len(table._cell_render_cache)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--ticks", type=int, default=30)
    args = parser.parse_args()
    for rows in args.rows:
        ms, cached = asyncio.run(sample_ms(rows, args.ticks))
        print(f"{rows:5d} rows: {ms:6.2f} ms a sample (median), {cached} cells cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
