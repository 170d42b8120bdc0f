"""The full-screen log's lines: the rows of a ``LogPage`` from a top line, matches highlighted.

Lines are the run's output, never markup (log_rows.py). A long line is chopped at the width and scrolls
sideways, as ``less -S`` shows it, or wraps into rows of the width, as ``less`` does; wrapping lays out only the
lines on screen, from the window the screen read (core/logs/window.py): it reads nothing more. The pane knows
nothing of files: the screen hands it pages.

Its place is the top line's index and, wrapping, the row of that line at the top (``sub``): a line of 64 KB is
hundreds of rows, each reached by scrolling.
"""

from __future__ import annotations

from rich.text import Text
from textual.events import MouseScrollDown, MouseScrollUp
from textual.message import Message
from textual.widget import Widget

from gpumon.core.format import size
from gpumon.core.logs.search import Needle
from gpumon.core.logs.window import LogPage
from gpumon.tui.views.runs.log_rows import chopped, columns_of, folded, parse, parse_limit, row_count

MATCH_STYLE = "black on yellow"
CURRENT_STYLE = "bold black on bright_green"


class LogPane(Widget):
    """Rows of the page from ``top``; ``pinned``: the last rows (following, or at the end). ``wrap``: long
    lines fold into rows; else they are chopped, shown from column ``left``."""

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
        self.sub = 0  # wrapping: the top line's first row shown
        self.pinned = True
        self.wrap = False
        self.left = 0  # chopped: the first column shown
        self.needle: Needle | None = None
        self.current: int | None = None  # the offset of the current match's line
        self.empty = "no output yet"
        self._parsed: dict[tuple[str, int | None], Text] = {}  # the lines on screen, parsed (kept for the next draw)

    @property
    def rows(self) -> int:
        return max(1, self.content_size.height)

    @property
    def columns(self) -> int:
        return max(1, self.content_size.width)

    def show(self, page: LogPage) -> None:
        """A new page: the same line stays on top (its offset), or the end shows while pinned."""
        anchor = self.page.offsets[self.top] if self.page.offsets and self.top < len(self.page.offsets) else None
        self.page = page
        if not self.pinned and anchor is not None and page.offsets:
            self.top = page.index_of(anchor)
        self._clamp()
        self.refresh()

    def scroll_by(self, lines: int) -> None:
        """``lines`` rows down (up when negative): lines, or wrapping, rows of them."""
        if lines < 0 and (self.top > 0 or self.sub > 0 or not self.page.at_start):
            self.pinned = False
        self._move(lines)
        if lines > 0 and (self.top, self.sub) >= self._end_place() and self.page.at_end:
            self.pinned = True
        self._clamp()
        self.refresh()
        self.post_message(self.Scrolled(up=lines < 0))

    def go_to(self, offset: int) -> None:
        """The line holding ``offset`` a third of the way down (a match: the lines before it show too)."""
        self.pinned = False
        self.top, self.sub = self.page.index_of(offset), 0
        self._move(-(self.rows // 3))
        self._clamp()
        self.refresh()

    def pin(self) -> None:
        self.pinned = True
        self._clamp()
        self.refresh()

    def set_wrap(self, wrap: bool) -> None:
        """Wrap long lines, or chop them (from the first column); the top line stays on top."""
        self.wrap, self.left, self.sub = wrap, 0, 0
        self._clamp()
        self.refresh()

    def sideways(self, columns: int) -> bool:
        """Chopped lines shown ``columns`` further right (left when negative), right as far as the end of the
        longest line on screen; whether the view moved."""
        if columns < 0:
            left = max(0, self.left + columns)
        else:
            longest = max((columns_of(self.page.lines[i]) for i, _, _ in self._shown()), default=0)
            left = max(self.left, min(self.left + columns, longest - self.columns))
        moved, self.left = left != self.left, left
        self.refresh()
        return moved

    def _height(self, index: int) -> int:
        return row_count(self.page.lines[index], self.columns) if self.wrap else 1

    def _move(self, rows: int) -> None:
        """The top ``rows`` rows down (up when negative), within the page."""
        if not self.wrap:
            self.top += rows
            return
        top, sub, last = self.top, self.sub + rows, len(self.page.lines) - 1
        while sub < 0 and top > 0:
            top -= 1
            sub += self._height(top)
        while top < last and sub >= self._height(top):
            sub -= self._height(top)
            top += 1
        self.top, self.sub = top, max(0, sub)

    def _end_place(self) -> tuple[int, int]:
        """The top (line, row) that shows the page's last row at the bottom; (0, 0) when the page fits."""
        room, index = self.rows, len(self.page.lines)
        if not self.wrap:
            return max(0, index - room), 0
        while index > 0:
            index -= 1
            height = self._height(index)
            if height >= room:
                return index, height - room
            room -= height
        return 0, 0

    def _clamp(self) -> None:
        end = self._end_place()
        if self.pinned or (self.top, self.sub) > end:
            self.top, self.sub = end
        self.top = max(0, self.top)
        self.sub = max(0, min(self.sub, self._height(self.top) - 1)) if self.page.lines else 0

    def near_start(self) -> bool:
        return self.top < self.rows and not self.page.at_start

    def near_end(self) -> bool:
        return self.top + 2 * self.rows > len(self.page.lines) and not self.page.at_end

    def _shown(self) -> list[tuple[int, int, int]]:
        """(line index, first row, row after the last) of each line on screen, top to bottom."""
        shown, room, index, sub = [], self.rows, self.top, self.sub
        while room > 0 and index < len(self.page.lines):
            rows = min(self._height(index) - sub, room)
            shown.append((index, sub, sub + rows))
            room, index, sub = room - rows, index + 1, 0
        return shown

    def shown_range(self) -> tuple[int, int]:
        """Offsets of the first and last lines on screen (the position the status line gives)."""
        shown, offsets = self._shown(), self.page.offsets
        return (offsets[shown[0][0]], offsets[shown[-1][0]]) if shown else (0, 0)

    def at_top(self) -> bool:
        return self.page.at_start and self.top == 0 and self.sub == 0

    def at_bottom(self) -> bool:
        """The log's last row is on screen (less's END)."""
        return self.page.at_end and (self.pinned or (self.top, self.sub) >= self._end_place())

    def position(self) -> str:
        """Where the view is, as less's prompt says it: ``END`` at the end, the top line's share of the file
        before it (0% at the top), ``all`` when the whole log shows."""
        whole = size(self.page.size)
        if self.at_bottom():
            return f"all {whole}" if self.at_top() else f"END of {whole}"
        return f"{100 * self.shown_range()[0] // max(1, self.page.size)}% of {whole}"

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
        width, lines = self.columns, self.page.lines
        if not lines:
            return Text(self.note_or_empty(), style="dim")
        rows: list[Text] = []
        parsed: dict[tuple[str, int | None], Text] = {}
        for index, first, stop in self._shown():
            key = (lines[index], parse_limit(lines[index], None if self.wrap else self.left + width))
            text = parsed.get(key) or self._parsed.get(key) or parse(*key)
            parsed[key], text = text, text.copy()  # highlighted below: the parse kept stays plain
            if self.needle is not None:
                current = self.page.offsets[index] == self.current
                for start, end in self.needle.spans(text.plain):
                    text.stylize(CURRENT_STYLE if current else MATCH_STYLE, start, end)
            rows.extend(folded(text, width)[first:stop] if self.wrap else [chopped(text, self.left, width)])
        self._parsed = parsed  # only the lines on screen: a 64 KB line of colours parsed holds ~860 KB
        shown = Text("\n").join(rows)
        shown.no_wrap = True
        return shown

    def note_or_empty(self) -> str:
        return self.page.note or self.empty
