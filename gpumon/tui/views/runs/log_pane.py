"""The full-screen log's lines: the rows of a ``LogPage`` from a top line, matches highlighted.

Lines are the run's output, never markup: each is parsed for ANSI colours only (``Text.from_ansi``)
and cut to the width. The pane knows nothing of files: the screen hands it pages (core/logs/window.py).
"""

from __future__ import annotations

from rich.text import Text
from textual.events import MouseScrollDown, MouseScrollUp
from textual.message import Message
from textual.widget import Widget

from gpumon.core.logs.search import Needle
from gpumon.core.logs.window import LogPage
from gpumon.core.visible import visible_log

PARSE = 4_000  # characters of a line parsed at most (a screen row shows fewer; colour codes take some)
MATCH_STYLE = "black on yellow"
CURRENT_STYLE = "bold black on bright_green"


class LogPane(Widget):
    """Rows of the page from ``top``; ``pinned``: the last rows (following, or at the end)."""

    DEFAULT_CSS = "LogPane { height: 1fr; padding: 0 1; }"
    can_focus = True

    class Scrolled(Message):
        """The user moved: ``up`` is True when toward the file's start (follow stops)."""

        def __init__(self, up: bool) -> None:
            self.up = up
            super().__init__()

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.page = LogPage()
        self.top = 0
        self.pinned = True
        self.needle: Needle | None = None
        self.current: int | None = None  # the offset of the current match's line
        self.empty = "no output yet"

    @property
    def rows(self) -> int:
        return max(1, self.content_size.height)

    def show(self, page: LogPage) -> None:
        """A new page: the same line stays on top (its offset), or the end shows while pinned."""
        anchor = self.page.offsets[self.top] if self.page.offsets and self.top < len(self.page.offsets) else None
        self.page = page
        if not self.pinned and anchor is not None and page.offsets:
            self.top = page.index_of(anchor)
        self._clamp()
        self.refresh()

    def scroll_by(self, lines: int) -> None:
        if lines < 0 and (self.top > 0 or not self.page.at_start):
            self.pinned = False
        self.top += lines
        if lines > 0 and self.top >= self.last_top() and self.page.at_end:
            self.pinned = True
        self._clamp()
        self.refresh()
        self.post_message(self.Scrolled(up=lines < 0))

    def go_to(self, offset: int) -> None:
        """The line holding ``offset`` a third of the way down (a match: the lines before it show too)."""
        self.pinned = False
        self.top = max(0, self.page.index_of(offset) - self.rows // 3)
        self._clamp()
        self.refresh()

    def pin(self) -> None:
        self.pinned = True
        self._clamp()
        self.refresh()

    def last_top(self) -> int:
        return max(0, len(self.page.lines) - self.rows)

    def _clamp(self) -> None:
        self.top = self.last_top() if self.pinned else max(0, min(self.top, self.last_top()))

    def near_start(self) -> bool:
        return self.top < self.rows and not self.page.at_start

    def near_end(self) -> bool:
        return self.top + 2 * self.rows > len(self.page.lines) and not self.page.at_end

    def shown_range(self) -> tuple[int, int]:
        """Offsets of the first and last lines on screen (the position the status line gives)."""
        offsets = self.page.offsets
        if not offsets:
            return 0, 0
        last = min(len(offsets), self.top + self.rows) - 1
        return offsets[min(self.top, len(offsets) - 1)], offsets[max(0, last)]

    def set_search(self, needle: Needle | None, current: int | None) -> None:
        if (needle, current) != (self.needle, self.current):
            self.needle, self.current = needle, current
            self.refresh()

    def on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        event.prevent_default()  # the Widget's own scrolling
        event.stop()
        self.scroll_by(-3)

    def on_mouse_scroll_down(self, event: MouseScrollDown) -> None:
        event.prevent_default()
        event.stop()
        self.scroll_by(3)

    def on_resize(self) -> None:
        self._clamp()

    def render(self) -> Text:
        width = self.content_size.width
        lines = self.page.lines
        if not lines:
            return Text(self.note_or_empty(), style="dim")
        shown = []
        for index in range(self.top, min(len(lines), self.top + self.rows)):
            # colours parsed; any other escape (clear, title, cursor) shown as text, never reaching the terminal
            text = Text.from_ansi(visible_log(lines[index][:PARSE], colour=True).expandtabs(), end="")
            text.no_wrap = True
            if self.needle is not None:
                current = self.page.offsets[index] == self.current
                for start, end in self.needle.spans(text.plain):
                    text.stylize(CURRENT_STYLE if current else MATCH_STYLE, start, end)
            text.truncate(width, overflow="ellipsis")
            shown.append(text)
        return Text("\n").join(shown)

    def note_or_empty(self) -> str:
        return self.page.note or self.empty
