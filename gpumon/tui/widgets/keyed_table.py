"""Tables whose rows are keyed by an id and whose cells sort by a key, not by their text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import DataTable


@dataclass(frozen=True)
class SortCell:
    """A cell that shows text but sorts by a key (numbers sort as numbers)."""

    key: Any
    text: Text

    def __rich__(self) -> Text:
        return self.text


class KeyedTable(DataTable[SortCell]):
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
        self.move_cursor(row=row, animate=False)
        return True
