"""The GPU list (its panels; up/down move the selection) and the notice shown when no GPU answers."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message

from gpumon.tui.widgets.focus_look import FocusLook

PANEL_ROWS = 5  # a GPU panel's lines, its border included (app.tcss .gpu-panel)
HOST_ROWS = 5  # the host panel's
PROCESS_MIN = 7  # the process table's least: its border, header and four rows


class GpuList(FocusLook, VerticalScroll):
    """The GPU panels; up/down move the selection while it has focus."""

    BINDINGS = [
        Binding("up,k", "step(-1)", "prev GPU", show=False, id="gpu_up", tooltip="previous GPU (the GPU list focused)"),
        Binding("down,j", "step(1)", "next GPU", show=False, id="gpu_down", tooltip="next GPU (the GPU list focused)"),
    ]
    can_focus = True

    class Step(Message):
        def __init__(self, step: int) -> None:
            self.step = step
            super().__init__()

    def fit(self, view_height: int, compact: bool) -> None:
        """As many whole panels as the view has room for beside the host panel and the process table: a
        panel is never cut at its border (the list scrolls by whole panels' worth of room instead)."""
        room = view_height - HOST_ROWS - PROCESS_MIN
        self.styles.max_height = max(3, room) if compact else max(PANEL_ROWS, room // PANEL_ROWS * PANEL_ROWS)

    def action_step(self, step: int) -> None:
        self.post_message(self.Step(step))


DEMO = "gpumon --simulate 4"  # as the README's "No GPU at hand?" says


def no_gpu_text(reason: str | None) -> Text:
    return Text.assemble(
        ("No GPU shown\n", "bold"),
        (f"{reason or 'no GPU source answered'}\n", "yellow"),
        ("The host panel is live. For a demo with simulated GPUs: ", "dim"),
        (DEMO, "bold"),
    )
