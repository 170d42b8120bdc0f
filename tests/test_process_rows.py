"""The process table at rest (issue 35): what one sample's changed process costs the table.

A process's SM% and memory both move at most samples; each changed cell dropped its row's caches, looked up the
row's region and repainted it on its own, so a row with two changed cells was repainted twice each second."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.padding import Padding
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from gpumon.core.format import num, size
from gpumon.tui.feeds import SampleReady
from gpumon.tui.textual_private.table import KeptCellsTable
from gpumon.tui.widgets.keyed_table import RowTable, SortCell
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app, pilot_until


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    return tmp_path


def showing(table: ProcessTable, devices: tuple[Any, ...]) -> bool:
    return table._last[0] is devices


def redrawn(panel: Any, drawn: object) -> bool:
    return panel._strips is not drawn


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


class Table(App[None]):
    def compose(self) -> ComposeResult:
        yield RowTable(cursor_type="row")


CELLS = [
    SortCell(1, Text("7", justify="right")),
    SortCell("", Text("")),
    SortCell("u", Text("researcher", style="dim")),
    SortCell(2, Text("80.0G", justify="right")),
    SortCell("r", Text("⏸ddp-c132 r1", style="bold black on yellow")),
    SortCell("c", Text.assemble(("├─ ", "dim"), "python train.py --model resnet50 --batch 512 --bf16 --lr 3e-4")),
    SortCell("w", Text("训练 任务 python 训练.py", justify="center")),
    SortCell("x", Text("a cell far wider than its column", justify="right", style="bold cyan")),
    SortCell("y", Text("  spaced  ", justify="full")),
]


def filled(table: RowTable) -> RowTable:
    """Three columns (widths 3, 8, 14) and a row per cell of CELLS, each row with three of them."""
    for width in (3, 8, 14):
        table.add_column(f"w{width}", width=width)
    for i, cell in enumerate(CELLS):
        table.add_row(cell, CELLS[(i + 3) % len(CELLS)], CELLS[(i + 5) % len(CELLS)], key=str(i))
    return table


async def test_a_one_line_cell_draws_what_datatable_draws() -> None:
    """The cell drawn without rich's console render (cell_draw.py) is DataTable's own, segment for segment (text,
    style and the row/column meta a click reads), for every cell, width, cursor and hover, focused or not."""
    app = Table()
    async with app.run_test(size=(120, 20)) as pilot:
        table = filled(app.query_one(RowTable))
        await pilot.pause()
        compared = 0
        for focused in (False, True):
            if focused:
                table.focus()
                await pilot.pause()
            table._pseudo_class_state = table.get_pseudo_class_state()
            for row in range(len(CELLS)):
                for column, width in enumerate((5, 10, 16)):  # the columns' render widths (padding included)
                    for base in (Style(), Style(color="#e0e0e0", bgcolor="#1e1e1e"), Style(bold=True)):
                        for cursor, hover in ((False, False), (True, False), (False, True), (True, True)):
                            table._cell_render_cache.clear()
                            ours = table._render_cell(row, column, base, width, cursor, hover)
                            table._cell_render_cache.clear()
                            theirs = DataTable._render_cell(table, row, column, base, width, cursor, hover)
                            assert ours == theirs, (row, column, width, base, cursor, hover)
                            assert ours[0][0].style.meta == theirs[0][0].style.meta  # type: ignore[union-attr]
                            compared += 1
        assert compared == 2 * len(CELLS) * 3 * 3 * 4


async def test_a_row_line_is_put_together_as_datatable_puts_it() -> None:
    """A changed row's line put together by row_draw.py is DataTable's own, segment for segment (style and the
    row/column meta a click reads, the blank that extends it): every row and the header, the cursor and the mouse
    on any row, zebra stripes or not, focused or not, a table narrower and wider than its columns."""
    app = Table()
    async with app.run_test(size=(120, 20)) as pilot:
        table = filled(app.query_one(RowTable))
        await pilot.pause()
        compared = 0
        states = ((False, False, True), (True, False, True), (True, True, True), (False, True, False))
        for zebra, focused, wide in states:
            table.zebra_stripes = zebra
            table.styles.width = 120 if wide else 20
            if focused:
                table.focus()
            await pilot.pause()
            table._pseudo_class_state = table.get_pseudo_class_state()
            keys = [table._header_row_key, *(row.key for row in table.ordered_rows)]
            for row_key in keys:
                for cursor in (0, 3, len(CELLS) - 1):
                    for hover in (-1, 0, 3):
                        at, over = Coordinate(cursor, 0), Coordinate(hover, 1)
                        table._row_render_cache.clear()
                        table._cell_render_cache.clear()
                        ours = table._render_line_in_row(row_key, 0, Style(color="#e0e0e0"), at, over)
                        table._row_render_cache.clear()
                        table._cell_render_cache.clear()
                        theirs = DataTable._render_line_in_row(table, row_key, 0, Style(color="#e0e0e0"), at, over)
                        assert ours == theirs, (row_key, cursor, hover, zebra, focused, wide)
                        metas = [[s.style.meta if s.style else None for s in cell] for cell in ours[1]]
                        assert metas == [[s.style.meta if s.style else None for s in cell] for cell in theirs[1]]
                        compared += 1
        assert compared == 4 * (len(CELLS) + 1) * 3 * 3


async def test_a_datatable_whose_private_parts_moved_still_draws_its_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual is pinned for the tests only: where a user's newer DataTable no longer fits what cell_line leans on
    (its private helper's signature), its cells are drawn DataTable's own way, the same segments, never an error."""

    def moved(*args: Any) -> Any:
        raise TypeError("_get_styles_to_render_cell() takes 8 positional arguments but 10 were given")

    monkeypatch.setattr(RowTable, "_cell_line", moved)
    monkeypatch.setattr(KeptCellsTable, "_own_cells", True)  # restored after the test
    app = Table()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(RowTable)
        table.add_column("w", width=8)
        table.add_row(CELLS[0], key="0")
        await pilot.pause()
        assert KeptCellsTable._own_cells is False  # given up at the first cell, for good
        table._cell_render_cache.clear()
        ours = table._render_cell(0, 0, Style(), 10)
        table._cell_render_cache.clear()
        assert ours == DataTable._render_cell(table, 0, 0, Style(), 10)


async def test_a_sample_draws_the_process_table_with_no_console_render(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted: rich console renders of the process table's cells a sample costs (its changed cells, 2-4 a sample
    at rest with simulated GPUs, before); the header is drawn once, as before."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count > 0 and table.column_set != ())
        # What the app draws ahead, unseen (the hidden views' tables), is drawn before the count begins.
        await pilot_until(pilot, lambda: not app.drawing_unseen() and all(w.is_finished for w in app.workers))
        await pilot.pause(0.3)
        rendered: list[object] = []
        render_lines = Console.render_lines

        def counted(self: Console, renderable: Any, *args: Any, **kwargs: Any) -> Any:
            rendered.append(renderable)
            return render_lines(self, renderable, *args, **kwargs)

        monkeypatch.setattr(Console, "render_lines", counted)
        updated: list[str] = []
        update_cells = ProcessTable.update_cells

        def counted_update(self: ProcessTable, row_key: Any, values: dict[Any, Any]) -> None:
            updated.extend(str(c) for c in values)
            update_cells(self, row_key, values)

        monkeypatch.setattr(ProcessTable, "update_cells", counted_update)
        for _ in range(3):
            app.sampler.sample_once()  # the simulated processes' SM% and memory move
            latest = app.sampler.latest
            assert latest is not None
            app.post_message(SampleReady(latest))
            await pilot_until(pilot, partial(showing, table, latest.gpu.devices))
            await pilot.pause(0.1)  # the frame: the changed rows drawn again
        assert "sm" in updated  # cells changed and were drawn
        assert [r for r in rendered if isinstance(getattr(r, "renderable", None), Padding)] == []
        for key, proc in table.processes.items():  # each row as the screen shows it: the last sample's values
            drawn = "".join(s.text for s in table.render_line(1 + table.get_row_index(key)))
            assert f" {num(proc.sm_util)} " in drawn and f" {size(proc.used_memory)} " in drawn


async def test_the_background_under_the_panels_and_table_is_walked_again_only_when_a_style_changed(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Textual reads each widget's background colours for each frame it draws it in (DOMNode.background_colors walks
    every ancestor), and DataTable again for each row line it draws; no style had changed. Counted: those walks for
    the panels and the process table over samples; then a theme changes them."""
    from textual.dom import DOMNode

    from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel

    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(ProcessTable)
        panel = app.query_one("#gpu-0", GpuPanel)
        await pilot_until(pilot, lambda: table.row_count > 0 and bool(panel._strips))
        await pilot.pause(0.3)
        walks: list[str | None] = []
        background_colors = DOMNode.background_colors

        def counted(self: DOMNode) -> Any:
            if isinstance(self, (GpuPanel, HostPanel, ProcessTable)):
                walks.append(self.id)
            return background_colors.fget(self)  # type: ignore[attr-defined]

        monkeypatch.setattr(DOMNode, "background_colors", property(counted))
        frames: list[object] = []
        display = type(app)._display

        def counted_frame(self: Any, screen: Any, renderable: Any) -> None:
            if renderable is not None:
                frames.append(renderable)
            display(self, screen, renderable)

        monkeypatch.setattr(type(app), "_display", counted_frame)
        for _ in range(3):
            drawn = panel._strips
            latest = app.sampler.sample_once()  # every GPU value moves, and the processes' SM% and memory
            app.post_message(SampleReady(latest))
            await pilot_until(pilot, partial(redrawn, panel, drawn))
            await pilot.pause(0.1)
        assert len(frames) >= 3  # drawn: the panels and the table's rows
        assert walks == []
        before = panel.background_colors
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await pilot.pause(0.3)
        after = panel.background_colors
        assert walks  # the theme changed the styles: walked again
        assert after != before and after == background_colors.fget(panel)  # type: ignore[attr-defined]
        assert table.background_colors == background_colors.fget(table)  # type: ignore[attr-defined]


async def test_a_changed_cell_drops_its_rows_drawn_cells_only_and_looks_at_no_other_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A changed cell walked every key of the table's caches to find its row's (40 ms a sample for 256 moving
    processes); now its row's entries are found by its key, the other rows' stay drawn, the new value shows."""
    app = Table()
    async with app.run_test(size=(120, 70)) as pilot:
        table = app.query_one(RowTable)
        for key in "abc":
            table.add_column(key, key=key, width=8)
        for i in range(64):
            table.add_row(*(SortCell(i, Text(f"{key}{i}")) for key in "abc"), key=str(i))
        await pilot.pause()
        cells = table._cell_render_cache
        before = set(cells._cache)
        assert {k[0].value for k in before} >= {str(i) for i in range(40)}  # drawn: the rows on screen
        looked: list[Any] = []
        discard = type(cells).discard
        monkeypatch.setattr(type(cells), "discard", lambda self, key: (looked.append(key), discard(self, key))[1])
        walked: list[int] = []
        keys = LRUCache.keys
        monkeypatch.setattr(LRUCache, "keys", lambda self: (walked.append(len(self)), keys(self))[1])
        table.update_cells("7", {"b": SortCell(700, Text("b700"))})
        assert not [n for n in walked if n > 1], walked  # no cache of more than one entry walked
        assert looked and {k[0].value for k in looked} == {"7"}  # only the changed row's entries were touched
        assert {k[1].value for k in looked if k in before and k[0].value == "7"} <= {"b"}
        assert set(cells._cache) == {k for k in before if not (k[0].value == "7" and k[1].value == "b")}
        await pilot.pause()
        line = table.render_line(8)  # the header, then rows 0-7
        assert "b700" in line.text and "a7" in line.text
