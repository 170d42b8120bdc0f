"""The full-screen log's window that goes on past the log's cap while the run lives.

Past its cap a log holds its head and the line where it was cut; until the run ends its latest output is in
``<log>.live`` (core/logs/live.py), then the log holds the kept tail. ``PastCapWindow`` pages the file as
``LogWindow`` does (never past the size it had when found past its cap) and, once the file's end is in the
window, the lines read from ``<log>.live`` after it: followed from the last byte read, with a line of ours
where more went by between two reads than that file holds (as ``gpumon logs --follow`` says it). A line
past the file's size has the offset ``size + p`` for byte ``p`` of the output past the cap, so the screen
anchors and searches by offset as in any log. Once ``<log>.live`` says the output ended, the window is the
file's alone again (head, cut line, kept tail): the live lines go, so the tail shows once.

At most ``keep`` live lines are held (the oldest go); each read is at most a chunk. Not thread-safe, as
``LogWindow``: one worker at a time calls it.
"""

from __future__ import annotations

from pathlib import Path

from gpumon.core.logs import live
from gpumon.core.logs.search import Needle
from gpumon.core.logs.window import CHUNK, KEEP, LogPage, LogWindow, decode_line, split_lines


def live_matches(page: LogPage, needle: Needle) -> list[int]:
    """The offsets of the page's lines past a capped log's cut that hold the text, ascending (a file scan
    does not reach them: they are in <log>.live, read into the page)."""
    if page.live_from is None:
        return []
    first = page.index_of(page.live_from)
    first += page.offsets[first] < page.live_from if page.offsets else 0
    return [page.offsets[first + i] for i in needle.in_lines(page.lines[first:])]


class PastCapWindow:
    """``LogWindow``'s methods and pages, with the run's latest output after a capped log's cut."""

    def __init__(self, path: Path, keep: int = KEEP, chunk: int = CHUNK) -> None:
        self.path = path
        self.file = LogWindow(path, keep=keep, chunk=chunk)
        self.keep, self.chunk = self.file.keep, self.file.chunk
        self.live_bytes = 0  # bytes read from <log>.live
        self._stop_live()

    @property
    def bytes_read(self) -> int:
        return self.file.bytes_read + self.live_bytes

    def _stop_live(self) -> None:
        self.base: int | None = None  # the file's size when found past its cap (None: not past it, or ended)
        self.since = 0  # bytes of the output past the cap read so far
        self._offsets: list[int] = []
        self._lines: list[str] = []
        self._open_at: int | None = None  # where the last line read begins when it had no newline yet
        self._open = b""  # its bytes: read again with what follows (a bar's frames, a line still coming)
        self.file.limit = None

    def page(self, note: str = "") -> LogPage:
        held = self.file.page(note)
        if self.base is None:
            return held
        size = self.base + self.since
        if held.end < self.base:  # the head is shown, not its end: the live lines come when it is reached
            return LogPage(held.lines, held.offsets, held.start, held.end, size, held.note, self.base)
        lines, offsets = list(held.lines), list(held.offsets)
        first = self._offsets[0] - self.base if self._offsets else self.since
        if first > 0:
            offsets.append(self.base)
            lines.append(f"[gpumon: {first:,} bytes of output past the cap not shown here; the latest output follows]")
        return LogPage((*lines, *self._lines), (*offsets, *self._offsets), held.start, size, size, held.note, self.base)

    # -- LogWindow's reads -----------------------------------------------------------
    def tail(self, note: str = "") -> LogPage:
        self._stop_live()
        page = self.file.tail(note)  # the file first: its kept tail is written before <log>.live says final
        got = live.read(self.path, None, self.chunk)
        if got is None or got[0].final or not page.size:
            return page
        held, data = got
        self._start_live(page.size)
        self.live_bytes += len(data)
        at = held.end - len(data)
        self._take(data, at, cut_first=at > 0)  # the output past the cap begins wherever the cap fell
        self.since = held.end
        return self.page(note)

    def older(self) -> LogPage:
        self.file.older()
        return self.page()

    def newer(self) -> LogPage:
        self.file.newer()
        return self.page()

    def around(self, offset: int) -> LogPage:
        if self.base is not None and offset >= self.base:  # a live line: in memory, after the file's end
            if self.file.page().end < self.base:
                self.file.tail()
            return self.page()
        self.file.around(offset)
        return self.page()

    def follow(self) -> LogPage:
        """What came since the last read: in the file until its cap, then in ``<log>.live``; the file
        alone again once the run's output ended."""
        if self.base is None:
            page = self.file.follow()
            got = live.read(self.path, 0, 0)  # the header only: did the log reach its cap since?
            if got is None or got[0].final or page.note or not page.at_end:
                return page
            self._start_live(page.size)
        elif self.file.page().end < self.base:  # scrolled up into the head: the end is the cut, then the live lines
            self.file.tail()
        return self._follow_live()

    # -- the output past the cap ---------------------------------------------------------
    def _start_live(self, size: int) -> None:
        self.base = self.file.limit = size  # what the file will get past this is the kept tail, at the end

    def _follow_live(self) -> LogPage:
        base = self.base
        assert base is not None
        while True:
            got = live.read(self.path, self.since, self.chunk)
            if got is None:  # gone: the run's folder was removed, or an adopter is about to write it again
                return self.page()
            held, data = got
            if held.final:  # the log holds the kept tail now: it shows instead of the lines read here
                self._stop_live()
                return self.file.tail()
            if held.end < self.since:  # a new supervisor (an adopter) began the output past the cap again
                return self.tail("the run's supervisor changed: read again from the log's end")
            self.live_bytes += len(data)
            at = max(self.since, held.first)
            if at > self.since:  # more came between two reads than <log>.live holds
                self._open_at, self._open = None, b""
                self._offsets.append(base + self.since)
                self._lines.append(f"[gpumon: {at - self.since} bytes of output went by unread]")
            if data:
                self._take(data, at, cut_first=False)
            self.since = at + len(data)
            if len(data) < self.chunk:
                return self.page()

    def _take(self, data: bytes, at: int, cut_first: bool) -> None:
        """The lines of ``data``, bytes ``at`` on of the output past the cap, after those held."""
        assert self.base is not None
        if self._open_at is not None:  # the open line goes on: split again from its start
            data, at, cut_first = self._open + data, self._open_at, False
            self._offsets.pop()
            self._lines.pop()
            self._open_at, self._open = None, b""
        offsets, raw, _ = split_lines(data, self.base + at, cut_first=cut_first, cut_last=False)
        if raw and not data.endswith(b"\n"):
            self._open_at, self._open = offsets[-1] - self.base, raw[-1]
        self._offsets += offsets
        self._lines += [decode_line(r) for r in raw]
        extra = len(self._lines) - self.keep
        if extra > 0:
            del self._offsets[:extra], self._lines[:extra]
