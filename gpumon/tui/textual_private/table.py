"""A DataTable whose drawn cells outlive a focus move and a resize back, and whose changed cell redraws that cell
and its row only, on DataTable's private caches and helpers.

DataTable throws away every drawn cell at each style change (a focus move), each Resize and each changed cell; the
idle GPUs view's process SM% each sample then redrew the whole table (docs/benchmarks.md, bench/table_rows.py and
bench/keys_counted.py). Here the caches are kept under DataTable's own keys, and a one-line cell is drawn by
``cell_line`` (widgets/cell_draw.py), a row's line by ``row_line`` (row_draw.py), each compared with DataTable's own
in tests/test_tables.py and tests/test_process_rows.py. Where a private is found moved, ``_own_cells`` goes False
and every cell is drawn DataTable's way from then on: slower, never wrong.
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.coordinate import Coordinate
from textual.events import Resize
from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from gpumon.tui.textual_private.row_draw import plain, row_line
from gpumon.tui.widgets.cell_draw import cell_line
from gpumon.tui.widgets.row_cache import RowCache


class KeptCellsTable(DataTable[Any]):
    """DataTable, its drawn cells kept (see each method)."""

    _own_cells = True  # one-line cells drawn by cell_line (_render_cell); False once DataTable's helpers moved

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._looks: dict[object, tuple[Style, ...]] = {}  # per focus/hover state: the styles cells drew with
        self._drawn_size = Size(0, 0)  # the size its cells were drawn for
        self._cell_render_cache: RowCache = RowCache(10000)  # DataTable's sizes; a row's entries found at once
        self._row_render_cache: RowCache = RowCache(1000)

    def resized(self, event: Resize) -> bool:
        """Whether the table now has another size than the one it was drawn at (hidden with its view, it
        is 0 by 0 for a while and comes back at its size: no change)."""
        return event.size != self._drawn_size

    def _on_resize(self, event: Resize) -> None:
        """DataTable counts each Resize, which misses every drawn cell; one that brings the table back to the
        size it had (its view shown again) keeps them."""
        if not KeptCellsTable._own_cells:
            return  # DataTable's own handler follows: the count
        event.prevent_default()  # DataTable's own handler: the count
        if self.resized(event):
            self._drawn_size = event.size
            self._update_count += 1

    def _look(self) -> tuple[Style, ...] | None:
        try:
            names = sorted(self._get_component_classes())
            return (self.rich_style, *(self.get_component_rich_style(name, partial=True) for name in names))
        except KeyError:  # styled for the first time: its component styles are not there yet
            return None
        except AttributeError:  # DataTable's private parts moved: its own way from now on
            KeptCellsTable._own_cells = False
            return None

    def notify_style_update(self) -> None:
        """DataTable throws away every drawn cell at any style change: each focus move (a view switch moves
        it), so a table shown again drew all its cells anew (25 ms and more for 20 runs). Its caches are
        keyed by focus and hover already; they are kept while the state the table is in now draws with the
        styles it drew with before (a theme change does not: then they go, as in DataTable)."""
        state, look = self.get_pseudo_class_state(), self._look() if KeptCellsTable._own_cells else None
        if look is None or self._looks.setdefault(state, look) != look:
            self._looks = {state: look} if look is not None else {}
            super().notify_style_update()
            return
        Widget.notify_style_update(self)  # the widget's own style caches, not the cells
        try:
            self._styles_cache.clear()
            self._get_styles_to_render_cell.cache_clear()
        except AttributeError:  # DataTable's private parts moved: its own way from now on
            KeptCellsTable._own_cells = False
            super().notify_style_update()
        self.refresh()

    def update_cell(
        self, row_key: RowKey | str, column_key: ColumnKey | str, value: Any, *, update_width: bool = False
    ) -> None:
        """DataTable counts each changed cell, which misses every drawn cell of the table (its header and every
        row drawn anew, and the whole table repainted): a sample tick changing one process's SM% cost the idle
        monitor more than all its panels. Here only that cell is drawn again and only its row repainted; a
        change that can move other cells (a column's width, a row's height) goes DataTable's way."""
        if update_width:
            super().update_cell(row_key, column_key, value, update_width=True)
            return
        self.update_cells(row_key, {column_key: value})

    def update_cells(self, row_key: RowKey | str, values: dict[Any, Any]) -> None:
        """Several cells of one row (column key -> value): each drawn again, the row repainted once. Cell by
        cell, each dropped the row's caches, looked up its region and repainted it again (a process's SM% and
        memory both move at most ticks: two of each)."""
        row_key = RowKey(row_key) if isinstance(row_key, str) else row_key
        columns = [ColumnKey(c) if isinstance(c, str) else c for c in values]
        if KeptCellsTable._own_cells:
            try:
                if self._row_changed(row_key, columns, list(values.values())):
                    return
            except AttributeError:  # DataTable's private parts moved: its own way from now on
                KeptCellsTable._own_cells = False
        for column_key, value in zip(columns, values.values(), strict=True):
            super().update_cell(row_key, column_key, value)

    def _row_changed(self, row_key: RowKey, columns: list[ColumnKey], values: list[Any]) -> bool:
        """The cells set, their row's drawn cells dropped and the row repainted; False where DataTable's own way
        must do it (a row of its own height, a column not there)."""
        row = self.rows.get(row_key)
        if row is None or row.auto_height or any(c not in self._column_locations for c in columns):
            return False
        data = self._data[row_key]
        for column_key, value in zip(columns, values, strict=True):
            data[column_key] = value
        changed = set(columns)
        row_index = self._row_locations.get(row_key)
        self._cell_render_cache.drop_row(row_key, lambda k: k[1] in changed)
        self._row_render_cache.drop_row(row_key)
        self._line_cache.clear()  # lines are joined from the rows' cached cells: cheap to join again
        if row_index is not None:  # keyed (update count, row index): an older count's is never read again
            self._row_renderable_cache.discard((self._update_count, row_index))
            self.refresh_row(row_index)
        return True

    def _render_line_in_row(
        self, row_key: RowKey, line_no: int, base_style: Style, cursor_location: Coordinate, hover_location: Coordinate
    ) -> tuple[list[list[Segment]], list[list[Segment]]]:
        """DataTable's, put together by row_draw.row_line where the table has no label or fixed column; kept in
        DataTable's cache under DataTable's key."""
        if not (KeptCellsTable._own_cells and plain(self)):
            return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)
        cache_key = (  # DataTable's own
            row_key,
            line_no,
            base_style,
            cursor_location,
            hover_location,
            self.cursor_type,
            self.show_cursor,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        hit = self._row_render_cache.get(cache_key)
        if hit is not None:
            return hit
        try:
            pair = row_line(self, row_key, line_no, base_style, cursor_location, hover_location)
        except (AttributeError, TypeError):  # DataTable's private parts moved: its own way from now on
            KeptCellsTable._own_cells = False
            return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)
        self._row_render_cache[cache_key] = pair
        return pair

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        """A body cell holding one line of text in a row one line high is drawn by ``cell_line`` (the same
        segments, without rich's console render of a padded, styled renderable: most of a changed cell's cost);
        any other cell as DataTable draws it. Kept in DataTable's cache under DataTable's key."""
        if KeptCellsTable._own_cells:
            try:
                lines = self._own_cell(row_index, column_index, base_style, width, cursor, hover)
            except (AttributeError, TypeError):  # DataTable's private parts moved (Textual is pinned for tests
                KeptCellsTable._own_cells = False  # only): its own way from now on, slower, never wrong
                lines = None
            if lines is not None:
                return lines
        return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)

    def _own_cell(
        self, row_index: int, column_index: int, base_style: Style, width: int, cursor: bool, hover: bool
    ) -> list[list[Segment]] | None:
        row_key = self._row_locations.get_key(row_index) if row_index >= 0 else self._header_row_key
        column_key = self._column_locations.get_key(column_index)
        cache_key: Any = (  # DataTable's own
            row_key,
            column_key,
            base_style,
            cursor,
            hover,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        lines = self._cell_render_cache.get(cache_key)
        if lines is not None:  # drawn before (DataTable's own key): as DataTable would return it
            return lines
        text = self._one_line_text(row_index, column_index)
        if text is None:
            return None
        lines = self._cell_render_cache[cache_key] = [
            self._cell_line(row_index, column_index, text, base_style, width, cursor, hover)
        ]
        return lines

    def _cell_line(
        self, row_index: int, column_index: int, text: Text, base_style: Style, width: int, cursor: bool, hover: bool
    ) -> list[Segment]:
        component_style, post_style = self._get_styles_to_render_cell(
            False,
            False,
            False,
            hover,
            cursor,
            self.show_cursor,
            self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        return cell_line(self.app.console, text, width, self.cell_padding, pre_style, post_style)

    def _one_line_text(self, row_index: int, column_index: int) -> Text | None:
        """The cell's text where ``cell_line`` draws it: a body cell (no header, label or fixed cell) in a row one
        line high, holding a text of one line (``cell_text``); else None."""
        if row_index < self.fixed_rows or column_index < self.fixed_columns:  # the header's row is -1
            return None
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        if row_key is None or column_key is None:
            return None
        row = self.rows.get(row_key)
        if row is None or row.height != 1 or row.auto_height:
            return None
        text = self.cell_text(self._data.get(row_key, {}).get(column_key))
        if text is None or "\n" in text.plain or "\t" in text.plain:
            return None
        return text

    def cell_text(self, value: object) -> Text | None:
        """The text a cell's value shows, where ``cell_line`` can draw it (a Text; a subclass adds its own cells)."""
        return value if isinstance(value, Text) else None
