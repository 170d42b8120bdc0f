"""A DataTable row's line, put together as DataTable puts it, with less asked of the table on the way.

A row whose cell changed (a process's SM% each sample) is put together again from its cells, most of them kept.
DataTable's own way reads the header's component style (a walk of the styles, ~40 µs here) for a label column or
fixed columns that these tables do not have, asks each column's width twice and builds a coordinate per cell for
its highlight: most of a changed row's cost beside the changed cell. ``row_line`` takes the same steps for a table
with neither (a row cursor), and gives back DataTable's value, which tests/test_tables.py compares.
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.coordinate import Coordinate

Lines = list[list[Segment]]


def plain(table: Any) -> bool:
    """Whether ``row_line`` draws this table's rows: no row label column shown, no fixed column, a row cursor."""
    return (
        not (table._labelled_row_exists and table.show_row_labels)
        and not table.fixed_columns
        and (table.cursor_type == "row")
    )


def row_line(
    table: Any, row_key: Any, line_no: int, base_style: Style, cursor: Coordinate, hover: Coordinate
) -> tuple[Lines, Lines]:
    """DataTable's ``_render_line_in_row`` for a ``plain`` table: (no fixed cells, the row's cells and the blank
    that extends it to the widget's width)."""
    row_index = table._row_locations.get(row_key) if row_key in table._row_locations else -1
    on_cursor, on_hover = cursor.row == row_index, hover.row == row_index
    row_style = table._get_row_style(row_index, base_style)
    render_cell = table._render_cell
    cells: Lines = []
    used = table._row_label_column_width
    for column_index, column in enumerate(table.ordered_columns):
        width = column.get_render_width(table)
        used += width
        cells.append(render_cell(row_index, column_index, row_style, width, cursor=on_cursor, hover=on_hover)[line_no])
    extend, _ = table._get_styles_to_render_cell(
        row_index == -1, False, False, on_hover, on_cursor, table.show_cursor,
        table._show_hover_cursor, False, False,
    )  # fmt: skip
    extend = row_style + extend + Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
    cells.append([Segment(" " * max(0, table.size.width - used), extend)])
    return [], cells
