"""The GPUs view's two text boxes, htop's F3 search and F4 filter: each labelled on its border, each with its own
keys in the footer (what enter and escape do there), and the view's part that acts on them as you type."""

from __future__ import annotations

from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Input

from gpumon.tui.widgets.process_table import ProcessTable


class SearchBox(Input):
    """F3: the first process whose PID, user or command has the words is selected as you type."""

    BINDINGS = [
        Binding("enter", "next", "next match", tooltip="select the next process that matches (F3 too)"),
        Binding("escape", "leave", "end search", tooltip="close the search box; the rows stay as they are"),
    ]

    def __init__(self) -> None:
        super().__init__(placeholder="words of the PID, user or command", id="process-search")
        self.border_title = "search (F3)"

    def action_next(self) -> None:
        self.post_message(self.Submitted(self, self.value))

    def action_leave(self) -> None:
        self.value = ""
        self.display = False
        self.screen.query_one(ProcessTable).focus()


class FilterBox(Input):
    """F4 or /: only the processes whose PID, user or command has the words, as you type."""

    BINDINGS = [
        Binding("enter", "done", "keep filter", tooltip="close the box and keep the filter (the title shows it)"),
        Binding("escape", "clear", "clear filter", tooltip="every process again"),
    ]

    def __init__(self) -> None:
        super().__init__(
            placeholder="words of the PID, user or command",
            id="process-filter",
            select_on_focus=False,  # the filter shown again: typing adds words
        )
        self.border_title = "filter (F4 /)"

    def action_done(self) -> None:
        self.post_message(self.Submitted(self, self.value))

    def action_clear(self) -> None:
        self.value = ""
        self.post_message(self.Submitted(self, ""))


class Boxes:
    """Mixed into the GPUs view: F3 and F4 open the boxes; what is typed acts at once."""

    def _box_focused(self) -> bool:
        """While a box has the focus its keys are the footer's: the view's own act on the table, not on the box."""
        assert isinstance(self, Widget)
        return isinstance(self.screen.focused, (SearchBox, FilterBox))

    def action_filter(self) -> None:
        assert isinstance(self, Widget)
        box = self.query_one(FilterBox)
        box.value = self.query_one(ProcessTable).filter_text
        box.display = True
        box.focus()
        box.cursor_position = len(box.value)

    def action_search(self) -> None:
        assert isinstance(self, Widget)
        box = self.query_one(SearchBox)
        if box.display and box.value.strip():  # F3 again, as in htop: the next match
            self._find(box.value, after=True)
            return
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:  # both boxes act as you type, as in htop
        assert isinstance(self, Widget)
        event.stop()
        if isinstance(event.input, FilterBox):
            self.query_one(ProcessTable).set_filter(event.value)
        elif isinstance(event.input, SearchBox) and event.value.strip():
            self._find(event.value, after=False)

    def _find(self, text: str, after: bool) -> None:
        assert isinstance(self, Widget)
        found = self.query_one(ProcessTable).find(text.lower().split(), after)
        self.query_one(SearchBox).set_class(not found, "-no-match")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        assert isinstance(self, Widget)
        event.stop()
        if isinstance(event.input, SearchBox):
            self._find(event.value, after=True)
            return
        table = self.query_one(ProcessTable)
        table.set_filter(event.value)
        self.query_one(FilterBox).display = False  # the table's title shows the filter
        table.focus()
