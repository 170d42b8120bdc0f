"""Tables whose rows are keyed by an id and whose cells sort by a key, not by their text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widget import Widget
from textual.widgets import DataTable

from gpumon.core.visible import visible
from gpumon.tui.textual_private.kept_style import KeptStyle
from gpumon.tui.textual_private.repaint import Coalesced
from gpumon.tui.textual_private.table import KeptCellsTable
from gpumon.tui.widgets.focus_look import FocusLook


@dataclass(frozen=True)
class SortCell:
    """A cell that shows text but sorts by a key (numbers sort as numbers)."""

    key: Any
    text: Text

    def __post_init__(self) -> None:
        shown = visible(self.text.plain)  # a control character in a cell's words (not ours): shown, never obeyed
        if shown is not self.text.plain:
            object.__setattr__(self, "text", Text(shown, style=self.text.style, justify=self.text.justify))
        if self.text.overflow is None:  # a value wider than its column ends in "…", never cut silently
            self.text.overflow = "ellipsis"

    def __rich__(self) -> Text:
        return self.text


class RowTable(Coalesced, KeptStyle, FocusLook, KeptCellsTable):
    """A DataTable whose Home and End go to the first and last row, as in htop (DataTable's own scroll sideways),
    and whose drawn cells outlive a focus move (textual_private/table.py), restyled on a focus change only when
    seen (FocusLook)."""

    BINDINGS = [
        Binding("home", "first_row", "first row", show=False),
        Binding("end", "last_row", "last row", show=False),
    ]

    def cell_text(self, value: object) -> Text | None:
        return value.text if isinstance(value, SortCell) else super().cell_text(value)

    def action_first_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=0, animate=False)

    def action_last_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1, animate=False)


class KeyedTable(RowTable):
    """A DataTable whose rows are keyed by an id: which id is under the cursor, and moving to one."""

    def selected_id(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:  # noqa: BLE001 - cursor outside the rows
            return None

    def select_key(self, key: str) -> bool:
        try:
            row = self.get_row_index(key)
        except Exception:  # noqa: BLE001 - no such row (filtered out, or not yet)
            return False
        if row == self.cursor_row and self.cursor_type == "row":
            # Already there, so move_cursor posts nothing: a sort may have brought this row under the cursor
            # without a word, and the view would go on showing the run it last heard of.
            row_key = self.coordinate_to_cell_key(Coordinate(row, 0)).row_key
            self.post_message(DataTable.RowHighlighted(self, row, row_key))
        else:
            self.move_cursor(row=row, animate=False)
        return True


Column = tuple[str, str, int]  # key, header, width
PADDING = 2  # a DataTable cell's padding, one each side


def fit_columns(
    columns: tuple[Column, ...], room: int, flexible: str | None = None, minimum: int = 8, drop: tuple[str, ...] = ()
) -> tuple[tuple[Column, ...], tuple[str, ...]]:
    """The columns that fit ``room`` cells, and the headers of those left out.

    ``flexible``'s width in ``columns`` is the most it wants (its longest value); it takes what the others leave,
    at least ``minimum``. When even that does not fit, the columns in ``drop`` are left out, in that order, and
    named, so that a table says what it hides instead of losing a column silently."""
    shown = list(columns)

    def need() -> int:
        return sum((min(w, minimum) if key == flexible else w) + PADDING for key, _, w in shown)

    hidden: list[str] = []
    for key in drop:
        if need() <= room:
            break
        column = next((c for c in shown if c[0] == key), None)
        if column is not None:
            shown.remove(column)
            hidden.append(column[1])
    spare = room - sum(w + PADDING for key, _, w in shown if key != flexible) - PADDING
    fitted = tuple((k, h, max(min(w, minimum), min(w, spare)) if k == flexible else w) for k, h, w in shown)
    return fitted, tuple(hidden)


def hidden_note(hidden: tuple[str, ...], room: int | None = None) -> str:
    """' · 2 columns hidden: acc, lr — widen the terminal' for a table's title; '' when none is. With ``room``
    (the cells the title leaves), the longest of its shorter forms that fits: the names, then the count alone."""
    if not hidden:
        return ""
    count = f"{len(hidden)} column{'s' if len(hidden) != 1 else ''}"
    names = ", ".join(hidden)
    forms = (
        f" · {count} hidden: {names} — widen the terminal",
        f" · {count} hidden: {names}",
        f" · {len(hidden)} hidden: {names}",
        f" · {count} hidden — widen the terminal",
        f" · {count} hidden",
        f" · {len(hidden)} hidden",
    )
    return next((form for form in forms if room is None or len(form) <= room), forms[-1])


def title_room(widget: Widget, title: str) -> int:
    """The cells a bordered widget's title has left after ``title``: its width less the corners and the
    spaces around the title ("╭─ title ─╮"); the screen's width before the widget has one."""
    width = widget.size.width or widget.app.size.width
    return width - 6 - len(title)
