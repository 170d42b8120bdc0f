"""A window of lines of one log file that costs the same for a 2 GB log as for a 2 KB one.

The window starts at the file's tail and slides: ``older()`` and ``newer()`` read one bounded chunk
before or after it with ``os.pread``, ``around(offset)`` jumps (to a search match), ``follow()`` reads
what was appended since the last read, from the last offset. At most ``keep`` lines are held; lines
past the other side are dropped. A line longer than ``MAX_LINE`` is held as pieces (a screen shows
one row of it anyway), so no read ever grows with a line's length. ``bytes_read`` counts every byte read.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from gpumon.core.logs.terminal import render
from gpumon.core.safefs import open_regular

CHUNK = 256 * 1024  # bytes per read
MAX_LINE = 64 * 1024  # a longer line is held as pieces of this many bytes
KEEP = 4_000  # lines held at most
FOLLOW_JUMP = 4 * 1024 * 1024  # further behind than this, follow goes to the tail (and says what it skipped)


def decode_line(raw: bytes) -> str:
    """One line's text as a terminal shows it: a progress bar is its latest frame (``terminal.py``)."""
    return render(raw.decode("utf-8", "replace"))


@dataclass(frozen=True)
class LogPage:
    """What the window holds: lines and where each starts in the file."""

    lines: tuple[str, ...] = ()
    offsets: tuple[int, ...] = ()  # byte offset of each line's start
    start: int = 0  # the first byte held (0: the file's beginning is held)
    end: int = 0  # after the last byte held (``size``: the file's end is held)
    size: int = 0  # the file's size when read
    note: str = ""  # what the last read did that the user should know (skipped, truncated, missing)
    live_from: int | None = None  # lines from this offset on are a capped log's latest output (core/logs/past_cap.py)

    @property
    def at_start(self) -> bool:
        return self.start == 0

    @property
    def at_end(self) -> bool:
        return self.end >= self.size

    def index_of(self, offset: int) -> int:
        """The index of the line holding byte ``offset`` (0 before the window, the last after it)."""
        return max(0, bisect_right(self.offsets, offset) - 1)


def split_lines(data: bytes, base: int, cut_first: bool, cut_last: bool) -> tuple[list[int], list[bytes], int]:
    """``data`` read at file offset ``base`` as (offsets, raw lines, end), in pieces of at most MAX_LINE.

    ``cut_first``: ``base`` may be inside a line, so bytes up to the first newline are dropped (unless
    there is none: then all of ``data`` is a piece of one long line; or when that cut line holds a bar's
    frames: then its whole frames are kept, as a terminal shows them). ``cut_last``: the bytes after the
    last newline may be a line cut by the read; they are dropped and ``end`` is where they begin.
    """
    begin = 0
    if cut_first:
        first = data.find(b"\n")
        if first < 0:
            return _pieces(data, base), _cut(data), base + len(data)
        cr = data.find(b"\r", max(0, first - MAX_LINE), first)  # a bar's whole frames end the cut line
        begin = first + 1 if cr < 0 else cr
    stop = len(data)
    if cut_last:
        last = data.rfind(b"\n", begin)
        if last >= 0:
            stop = last + 1
        # no newline at all: one long line's piece, kept whole
    offsets: list[int] = []
    lines: list[bytes] = []
    pos = begin
    while pos < stop:
        nl = data.find(b"\n", pos, stop)
        line_end = stop if nl < 0 else nl
        for i in _starts(data, pos, line_end):
            offsets.append(base + i)
            lines.append(data[i : min(i + MAX_LINE, line_end)])
        pos = line_end + 1
    return offsets, lines, base + stop


def _starts(data: bytes, begin: int, end: int) -> range:
    """Where the pieces of the line ``data[begin:end]`` start: every MAX_LINE bytes, or for a progress bar
    longer than that (frames joined by ``\\r``) one piece, its last whole frames: a terminal shows one row."""
    if end - begin > MAX_LINE:
        cr = data.find(b"\r", end - MAX_LINE, end)
        if cr >= 0:
            return range(cr, cr + 1)
    return range(begin, max(end, begin + 1), MAX_LINE)


def _pieces(data: bytes, base: int) -> list[int]:
    return [base + i for i in _starts(data, 0, len(data))]


def _cut(data: bytes) -> list[bytes]:
    return [data[i : i + MAX_LINE] for i in _starts(data, 0, len(data))]


class LogWindow:
    """The lines of a window of ``path``; every method reads at most a few chunks and returns the page.

    Not thread-safe: one worker at a time calls it (the screen's worker group is exclusive).
    """

    def __init__(self, path: Path, keep: int = KEEP, chunk: int = CHUNK) -> None:
        self.path = path
        self.keep = max(10, keep)
        self.chunk = max(1024, chunk)
        self.bytes_read = 0
        self._offsets: list[int] = []
        self._lines: list[str] = []
        self._start = self._end = self._size = 0
        self._partial = False  # the last line held had no newline yet (it may grow)
        self._inode: tuple[int, int] | None = None
        self.limit: int | None = None  # bytes past this are not read (a capped log's end while its run lives)

    def _sized(self, size: int) -> int:
        return size if self.limit is None else min(size, self.limit)

    def page(self, note: str = "") -> LogPage:
        return LogPage(tuple(self._lines), tuple(self._offsets), self._start, self._end, self._size, note)

    def _read(self, offset: int, length: int) -> bytes:
        fd = open_regular(self.path)  # a link or a FIFO in its place: NotRegular, said as the page's note
        try:
            stat = os.fstat(fd)
            self._size = self._sized(stat.st_size)
            self._inode = (stat.st_dev, stat.st_ino)
            data = os.pread(fd, max(0, min(length, self._size - offset)), offset) if offset < self._size else b""
        finally:
            os.close(fd)
        self.bytes_read += len(data)
        return data

    def _stat(self) -> os.stat_result | None:
        try:
            return os.lstat(self.path)
        except OSError:
            return None

    def tail(self, note: str = "") -> LogPage:
        """The last chunk's lines (where a log opens, and where follow goes when far behind)."""
        stat = self._stat()
        if stat is None:
            self._offsets, self._lines, self._inode = [], [], None
            self._start = self._end = self._size = 0
            return self.page("no output yet")
        size = self._sized(stat.st_size)
        base = max(0, size - self.chunk)
        try:
            data = self._read(base, size - base)
        except OSError as err:
            return self.page(f"cannot read it: {err.strerror or err}")
        offsets, raw, end = split_lines(data, base, cut_first=base > 0, cut_last=False)
        self._offsets, self._lines = offsets, [decode_line(r) for r in raw]
        self._start = offsets[0] if offsets else base + len(data)
        self._end = end
        self._partial = bool(data) and not data.endswith(b"\n")
        self._trim(keep_end=True)
        return self.page(note)

    def older(self) -> LogPage:
        """One chunk before the window added to it (the newest lines dropped past ``keep``)."""
        if self._start <= 0:
            return self.page()
        base = max(0, self._start - self._span())
        try:
            data = self._read(base, self._start - base)
        except OSError as err:
            return self.page(f"cannot read it: {err.strerror or err}")
        offsets, raw, _ = split_lines(data, base, cut_first=base > 0, cut_last=False)
        if not offsets and data:  # the chunk is inside one long line: held as a piece, so the window moves
            offsets, raw = _pieces(data, base), _cut(data)
        half = self.keep // 2  # the lines next to the window: those it held before stay (the view is there)
        offsets, raw = offsets[-half:], raw[-half:]
        self._offsets[:0], self._lines[:0] = offsets, [decode_line(r) for r in raw]
        self._start = offsets[0] if offsets else self._start
        self._trim(keep_end=False)
        return self.page()

    def newer(self) -> LogPage:
        """One chunk after the window added to it, at most ``keep // 2`` lines of it (so the lines the window
        held next to them stay); the oldest lines dropped past ``keep``."""
        return self._newer(bounded=True)

    def _newer(self, bounded: bool) -> LogPage:
        stat = self._stat()
        if stat is None:
            return self.page("the log is gone")
        if (stat.st_dev, stat.st_ino) != self._inode and self._inode is not None:
            return self.tail("the log was replaced: read again from its end")
        if stat.st_size < self._end:
            return self.tail("the log was truncated: read again from its end")
        if self._partial and self._offsets:  # the last line may have grown: read it again
            self._end = self._offsets.pop()
            self._lines.pop()
            self._partial = False
        if self._sized(stat.st_size) <= self._end:
            self._size = self._sized(stat.st_size)
            return self.page()
        try:
            data = self._read(self._end, self._span() if bounded else self.chunk)
        except OSError as err:
            return self.page(f"cannot read it: {err.strerror or err}")
        whole = self._end + len(data) >= self._size
        offsets, raw, end = split_lines(data, self._end, cut_first=False, cut_last=not whole)
        half = self.keep // 2
        if bounded and len(offsets) > half:
            end, whole = offsets[half], False
            offsets, raw = offsets[:half], raw[:half]
        # The last line held is still open (a long line, a bar) when the read ended inside it: the next read
        # takes it again, so a bar stays one row however many chunks its frames span.
        self._partial = bool(data) and end == self._end + len(data) and not data.endswith(b"\n")
        self._offsets += offsets
        self._lines += [decode_line(r) for r in raw]
        self._end = end
        self._trim(keep_end=True)
        return self.page()

    def follow(self) -> LogPage:
        """What was appended since the last read, read from the last offset in chunks; a log more than
        FOLLOW_JUMP ahead is read from its tail instead (the skipped bytes are said)."""
        stat = self._stat()
        if stat is None:
            return self.page("no output yet") if not self._lines else self.page("the log is gone")
        if self._inode is None:
            return self.tail()
        behind = self._sized(stat.st_size) - self._end
        if behind > FOLLOW_JUMP:
            return self.tail(f"follow skipped {behind - self.chunk:,} bytes written faster than shown")
        page = self._newer(bounded=False)  # following: the newest lines matter, the oldest may go
        while not page.at_end and not page.note:
            page = self._newer(bounded=False)
        return page

    def around(self, offset: int) -> LogPage:
        """A window with the line at ``offset`` in its middle (a search match far from the window)."""
        if self._offsets and self._offsets[0] <= offset < self._end and len(self._lines) > 1:
            return self.page()
        base = max(0, offset - self.chunk // 2)
        try:
            data = self._read(base, self.chunk)
        except OSError as err:
            return self.page(f"cannot read it: {err.strerror or err}")
        whole = base + len(data) >= self._size
        offsets, raw, end = split_lines(data, base, cut_first=base > 0, cut_last=not whole)
        low = max(0, bisect_right(offsets, offset) - 1 - self.keep // 2)  # at most keep lines, the target mid
        if low + self.keep < len(offsets):
            end, whole = offsets[low + self.keep], False
        offsets, raw = offsets[low : low + self.keep], raw[low : low + self.keep]
        self._offsets, self._lines = offsets, [decode_line(r) for r in raw]
        self._start = offsets[0] if offsets else base
        self._end = end
        self._partial = whole and bool(data) and not data.endswith(b"\n")
        return self.page()

    def _span(self) -> int:
        """Bytes for about ``keep // 2`` lines at the held lines' mean length (a chunk at most): short
        lines are not read a chunk at a time only to be dropped."""
        if len(self._lines) < 10:
            return self.chunk
        mean = (self._end - self._start) / len(self._lines)
        return int(min(self.chunk, max(4096, mean * self.keep // 2 * 1.25)))

    def _trim(self, keep_end: bool) -> None:
        extra = len(self._lines) - self.keep
        if extra <= 0:
            return
        if keep_end:
            del self._offsets[:extra], self._lines[:extra]
            self._start = self._offsets[0]
        else:
            self._end = self._offsets[self.keep]
            del self._offsets[self.keep :], self._lines[self.keep :]
            self._partial = False
