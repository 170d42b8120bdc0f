"""Views drawn ahead, unseen, and the one rule for all that is built ahead: nothing once the app began to stop.

A view the switcher hides was never laid out nor drawn: its first showing laid out and drew every widget of it on
its key's path (the first `r` drew the whole Runs table: 130-190 ms at rest, later ones 53). Shortly after the start
(app_ahead.py ``WorkAhead.lay_out``) each hidden view is laid out in a compositor of its own, at the size of the
view shown, and drawn once: its widgets keep their sizes and their drawn lines, and its first showing only composes
them, as every later one does. Nothing is written to the terminal, no widget gets a Show event, the focus stays put.
A view whose first read comes after that draw says so (``DrawnLate``) and is drawn unseen again. The footer's hidden
sets of keys are drawn the same way (widgets/footer.py ``draw_ahead``), and the help and the launch form, installed
but not shown, are laid out until they ask for no other layout (``lay_out``). That work is
textual_private/offscreen.py's.
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.message import Message
from textual.widget import Widget

from gpumon.tui.textual_private.nodes import exiting


class DrawnLate(Message):
    """A hidden view's first content (its first read) came after the app drew it unseen (a slow read on a loaded
    machine): the app draws it unseen again, else its first showing draws it on its key's path."""

    def __init__(self, view: Widget) -> None:
        super().__init__()
        self.view = view


def stopping(app: App[Any]) -> bool:
    """The app began to stop: exit() was asked, or it no longer runs (Pilot's end takes it down without exit()).
    What is built, filled or drawn ahead is then left: its widgets are going."""
    return exiting(app) or not app.is_running
