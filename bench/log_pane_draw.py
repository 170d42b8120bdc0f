"""What drawing the full-screen log's lines costs, chopped (as ``less -S``, scrolled sideways) and wrapped, against
the pane before issue 50 (each line's first 4,000 characters parsed at every draw, cut at the width).

A page of lines is handed to a LogPane, headless, as the screen hands it a window read from the file: nothing
here reads a file (wrapping lays out the lines held, it reads no more). Prints the CPU ms of one draw of the
screen, first (the lines parsed; sideways, the two → presses too) and again (as at each key), per kind of line.

Usage: PYTHONPATH=. python bench/log_pane_draw.py [--size 80x24 200x60] [--draws 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

from rich.text import Text
from textual.app import App, ComposeResult

from gpumon.core.logs.window import MAX_LINE, LogPage
from gpumon.core.visible import visible_log
from gpumon.tui.views.runs import log_rows
from gpumon.tui.views.runs.log_pane import LogPane

KINDS = {  # each line differs from the others: a first draw parses every line shown
    "short lines (60 chars)": lambda i: f"step {i} loss 0.{i:04d} lr 3e-4 tok/s 41,020 mem 12.4 GiB ok ok",
    "64 KB plain lines": lambda i: ("x" * MAX_LINE)[: MAX_LINE - 8] + f"{i:08d}",
    "64 KB coloured lines": lambda i: (f"{i:08d} " + "\x1b[32mgreen\x1b[0m word " * 6000)[:MAX_LINE],
}


def before(pane: LogPane) -> Text:
    """The pane's draw before issue 50 (main at 805c29c): parse each line's first 4,000 characters, cut."""
    width, shown = pane.columns, []
    for line in pane.page.lines[pane.top : pane.top + pane.rows]:
        text = Text.from_ansi(visible_log(line[:4000], colour=True).expandtabs(), end="")
        text.truncate(width, overflow="ellipsis")
        shown.append(text)
    return Text("\n").join(shown)


class Pane(App[None]):
    def compose(self) -> ComposeResult:
        yield LogPane()


async def draw_ms(size: tuple[int, int], line: Callable[[int], str], how: str, draws: int) -> tuple[float, float]:
    app = Pane()
    async with app.run_test(size=size) as pilot:
        pane = app.query_one(LogPane)
        lines = tuple(line(i) for i in range(400))
        pane.show(LogPage(lines, tuple(range(0, 400 * MAX_LINE, MAX_LINE)), 0, 400 * MAX_LINE, 400 * MAX_LINE))
        await pilot.pause()
        pane.set_wrap(how == "wrapped")
        draw = (lambda: before(pane)) if how == "before" else pane.render
        if how == "chopped, 2 screens right":  # the keys' cost counted in the first draw: each line measured
            draw = lambda: (pane.sideways(pane.columns), pane.sideways(pane.columns), pane.render())[-1]  # noqa: E731
        for cache in (log_rows.row_count, log_rows.columns_of):
            cache.cache_clear()
        pane._parsed.clear()
        started = time.thread_time()
        draw()
        first = (time.thread_time() - started) * 1000
        if how == "chopped, 2 screens right":
            draw = pane.render
        again = []
        for _ in range(draws):
            started = time.thread_time()
            draw()
            again.append((time.thread_time() - started) * 1000)
        return first, statistics.median(again)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", nargs="+", default=["80x24", "200x60"])
    parser.add_argument("--draws", type=int, default=20)
    args = parser.parse_args()
    print("| screen | lines | draw | first draw, ms | each draw after, ms |")
    print("| --- | --- | --- | ---: | ---: |")
    for text in args.size:
        width, height = (int(n) for n in text.split("x"))
        for kind, line in KINDS.items():
            for how in ("before", "chopped", "chopped, 2 screens right", "wrapped"):
                first, again = asyncio.run(draw_ms((width, height), line, how, args.draws))
                print(f"| {text} | {kind} | {how} | {first:.2f} | {again:.2f} |", flush=True)


if __name__ == "__main__":
    main()
