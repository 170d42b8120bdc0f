"""The Runs view's queue keys: + / - move a queued run ahead or back, S starts it now (asked first); T on a
queued run cancels it (asked first). Each change runs in a thread worker through core/queue/submit.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work
from textual.binding import Binding
from textual.widget import Widget

from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.record.store import RunStore
from gpumon.tui.views.runs.reading import RunActionDone
from gpumon.tui.widgets.screens import ConfirmScreen

# Not in the footer (it is full at 120 columns and q must stay there); the help lists them.
QUEUE_BINDINGS = [
    Binding(
        "plus",
        "queue_move(-1)",
        "raise",
        id="queue_up",
        tooltip="move the selected queued run one place ahead",
        show=False,
    ),
    Binding(
        "minus",
        "queue_move(1)",
        "lower",
        id="queue_down",
        tooltip="move the selected queued run one place back",
        show=False,
    ),
    Binding(
        "S",
        "queue_start",
        "start now",
        id="queue_start",
        tooltip="start the selected queued run now (asks)",
        show=False,
    ),
]
READONLY = "the queue is not changed"


class Queueing(Widget):
    store: RunStore | None

    if TYPE_CHECKING:  # the view's own

        def selected(self) -> RunSummary | None: ...
        def refused(self, what: str) -> bool: ...

    def _queued(self) -> RunSummary | None:
        summary = self.selected()
        if summary is None or summary.state != "queued":
            what = "Select a queued run first" if summary is None else f"{summary.id} is not queued ({summary.state})"
            self.notify(what, severity="warning", timeout=4, markup=False)
            return None
        return summary

    def action_queue_move(self, step: int) -> None:
        if self.refused(READONLY):
            return
        summary = self._queued()
        if summary is not None:
            self.queue_change(summary.id, "move", step)

    def action_queue_start(self) -> None:
        if self.refused(READONLY):
            return
        summary = self._queued()
        if summary is None:
            return
        run_id = summary.id
        why = summary.queue[1] if summary.queue else "it waits in the queue"
        question = f"Start {run_id} now?\nIt would still be waiting: {why}."

        def answered(yes: bool | None) -> None:
            if yes:
                self.queue_change(run_id, "start", 0)

        self.app.push_screen(ConfirmScreen(question), answered)

    def ask_cancel(self, summary: RunSummary) -> None:
        """T on a queued run: cancel it (it never started, so nothing is signalled)."""
        run_id = summary.id

        def answered(yes: bool | None) -> None:
            if yes:
                self.queue_change(run_id, "cancel", 0)

        self.app.push_screen(
            ConfirmScreen(f"Cancel queued run {run_id}?\nIt leaves the queue without starting."), answered
        )

    @work(thread=True, exit_on_error=False, group="runs-action")
    def queue_change(self, run_id: str, what: str, step: int) -> None:
        from gpumon.core.queue import submit

        root = (self.store or RunStore()).root
        if what == "cancel":
            done = submit.cancel(root, run_id)
            text = f"Cancelled {run_id}" if done else f"{run_id} had already started: stop it with T"
        elif what == "start":
            text = submit.start_now(root, run_id)
        else:
            text = submit.move(root, run_id, step)
        self.post_message(RunActionDone(text[:1].upper() + text[1:], "information"))
