"""The GPU list (its panels; up/down move the selection) and the notice shown when no GPU answers."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message

from gpumon.tui.widgets.focus_look import FocusLook
from gpumon.tui.widgets.gpu_panels import GpuPanel

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
        self.call_after_refresh(self.say_hidden)

    def places(self) -> tuple[list[GpuPanel], list[GpuPanel], list[GpuPanel]]:
        """The panels above the list's view (scrolled past or cut), whole in it, and below it."""
        top, height = self.scroll_offset.y, self.scrollable_content_region.height
        above: list[GpuPanel] = []
        seen: list[GpuPanel] = []
        below: list[GpuPanel] = []
        for panel in self.query_children(GpuPanel):
            box = panel.virtual_region
            (above if box.y < top else below if box.bottom > top + height else seen).append(panel)
        return above, seen, below

    def hidden_text(self, above: int, below: int) -> str | None:
        """'▼ 2 more GPUs below · c compact': how many GPUs the list hides and how to see them (None: none)."""
        how = "tab, ↓ scrolls" if self.parent_compact() else "c compact"
        if above and below:
            return f"▲ {above} above ▼ {below} below · {how}"
        count = above or below
        if not count:
            return None
        arrow, where = ("▲", "above") if above else ("▼", "below")
        return f"{arrow} {count} more GPU{'s' if count != 1 else ''} {where} · {how}"

    def parent_compact(self) -> bool:
        return self.parent is not None and self.parent.has_class("-compact")

    def say_hidden(self) -> None:
        """Put the hidden GPUs' count where the list ends: the bottom border of its last panel in sight (a compact
        list's own border). A list not laid out yet hides nothing."""
        above, seen, below = self.places() if self.size.height else ([], [], [])
        text = self.hidden_text(len(above), len(below))
        compact = self.parent_compact()
        self.border_subtitle = (text or "") if compact else ""
        text = None if compact else text
        last = seen[-1] if seen else None
        for panel in self.query_children(GpuPanel):
            panel.set_hint(text if panel is last else None)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self.call_after_refresh(self.say_hidden)

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
