"""The newest lines of a log, cut to the width."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

from gpumon.core.visible import visible_log


@dataclass(frozen=True)
class LogTail:
    """Read by the runs worker: the log lines of one choice among a run's logs."""

    run_id: str
    choices: tuple[int | None, ...]  # rank numbers, then None when torchrun wrote one
    choice: int | None
    lines: tuple[str, ...]


class LogView(Widget):
    """The newest lines of one log, cut to the width (no wrapping), the newest at the bottom, and under
    them a note when one is set (why a followed log stopped coming)."""

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines: tuple[str, ...] = ()
        self.empty = "no log yet"
        self.note = ""

    def show(self, lines: tuple[str, ...], empty: str) -> None:
        if lines != self.lines or empty != self.empty:
            self.lines, self.empty = lines, empty
            self.refresh()

    def append(self, lines: tuple[str, ...], keep: int) -> None:
        """Lines that came after those shown (a followed log); the newest ``keep`` are kept."""
        if lines:
            self.lines = (self.lines + lines)[-keep:]
            self.refresh()

    def set_note(self, note: str) -> None:
        if note != self.note:
            self.note = note
            self.refresh()

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        note = Text(self.note, style="red", end="")
        note.truncate(width, overflow="ellipsis")
        if not self.lines:
            return Text.assemble(Text(self.empty, style="dim"), "\n", note) if self.note else Text(self.empty, "dim")
        rows = max(0, height - 1) if self.note else height
        shown = []
        for line in self.lines[-rows:] if rows else ():
            text = Text.from_ansi(visible_log(line, colour=True).expandtabs())  # colours only: other escapes shown
            text.truncate(width, overflow="ellipsis")
            shown.append(text)
        return Text("\n").join([*shown, note] if self.note else shown)
