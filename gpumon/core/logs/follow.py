"""A growing log followed in bounded chunks, drawn as a terminal draws it (``gpumon logs --follow``).

Memory stays the same whatever the flood: at most ``CHUNK`` bytes are read at a time, and the line being
drawn holds at most ``terminal.CAP`` characters. Each finished line is written whole. The line still being
drawn (a progress bar's frames, no newline yet) is, on a terminal, redrawn in place (``\\r``, the frame,
clear to the line's end); into a pipe (a remote host's follower, a file) its latest frame is written as a
line of its own at most every ``EVERY_S``, and once more when it ends only if it changed. Once the log has
reached its cap, the follower goes on in ``<log>.live`` (core/logs/live.py), which holds what came since.
"""

from __future__ import annotations

import codecs
import os
import time
from collections.abc import Iterator
from pathlib import Path

from gpumon.core.logs import live
from gpumon.core.logs.terminal import TermLine
from gpumon.core.safefs import open_regular
from gpumon.core.visible import visible_log

CHUNK = 256 * 1024
EVERY_S = 0.25  # a frame drawn at most this often (4 a second)
CLEAR = "\x1b[K"  # erase to the end of the line


class LogFollower:
    """``poll()`` returns the text to write for what was appended since the last call."""

    def __init__(self, path: Path, offset: int, tty: bool, chunk: int = CHUNK, past_cap: int | None = None) -> None:
        """``past_cap``: where in the output past the log's cap to go on (``<log>.live``'s end when the
        lines already shown came from there); None while the log has not reached its cap."""
        self.path = path
        self.offset = offset
        self.past_cap = past_cap
        self.tty = tty
        self.chunk = chunk
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._line = TermLine()
        self._open = False  # a line is being drawn (bytes since the last newline)
        self._drawn = ""  # the frame last written of the open line
        self._drawn_at = 0.0

    def resume(self, partial: str) -> str:
        """The tail's last line had no newline yet: it is the line being drawn (written once, here)."""
        self._line.feed(partial)
        self._open = True
        self._drawn, self._drawn_at = self._line.shown(), time.monotonic()
        return self._shown(self._drawn) if self.tty else self._shown(self._drawn) + "\n"

    def poll(self) -> Iterator[str]:
        """Pieces of text to write, one per chunk read (each at most about a chunk)."""
        while True:
            data = self._read() if self.past_cap is None else b""  # past the cap the log only repeats the tail
            if not data:
                data = self._read_live()
            if not data:
                break
            yield self._draw(self._decoder.decode(data))
            if len(data) < self.chunk:
                break
        if self._open:  # the bar as it stands now (throttled)
            frame = self._frame(time.monotonic(), force=False)
            if frame:
                yield frame

    def _shown(self, text: str) -> str:
        """The run's text as it may reach the terminal: colours on a terminal only, other escapes shown."""
        return visible_log(text, colour=self.tty)

    def _read_live(self) -> bytes:
        """What came past the cap since the last read, prefixed by a line of ours when some of it went by
        unread (more than ``<log>.live`` holds came between two reads)."""
        since = self.past_cap or 0
        got = live.read(self.path, since, self.chunk)
        if got is None:
            return b""
        held, data = got
        if held.final and self.past_cap is None:  # the run ended first: its log holds the kept tail, read there
            return b""
        if held.end < since:  # a new supervisor (an adopter) began the output past the cap again
            since = held.first
            got = live.read(self.path, since, self.chunk)
            if got is None:
                return b""
            held, data = got
        self.past_cap = max(since, held.first) + len(data)
        if held.first > since:
            return f"\n[gpumon: {held.first - since} bytes of output went by unread]\n".encode() + data
        return data

    def _read(self) -> bytes:
        try:
            fd = open_regular(self.path)  # never a FIFO's writer to wait for, never through a link
        except OSError:
            return b""
        try:
            data = os.pread(fd, self.chunk, self.offset)
        except OSError:
            return b""
        finally:
            os.close(fd)
        self.offset += len(data)
        return data

    def _draw(self, text: str) -> str:
        out: list[str] = []
        if not self._open and "\r" not in text:  # plain lines (most logs): written as they are
            last = text.rfind("\n") + 1
            out.append(self._shown(text[:last]))
            text = text[last:]
        parts = text.split("\n")
        for i, part in enumerate(parts):
            if i < len(parts) - 1:  # this part ends a line
                self._line.feed(part)
                shown = self._line.shown()
                if self.tty:
                    out.append(("\r" + self._shown(shown) + CLEAR if self._open else self._shown(shown)) + "\n")
                elif not self._open or shown != self._drawn:
                    out.append(self._shown(shown) + "\n")
                self._line, self._open, self._drawn = TermLine(), False, ""
            elif part:
                self._line.feed(part)
                self._open = True
        return "".join(out)

    def _frame(self, now: float, force: bool) -> str:
        shown = self._line.shown()
        if shown == self._drawn or (not force and now - self._drawn_at < EVERY_S):
            return ""
        self._drawn, self._drawn_at = shown, now
        return "\r" + self._shown(shown) + CLEAR if self.tty else self._shown(shown) + "\n"

    def close(self) -> str:
        """The run ended: the line still open is written as it stands, ended."""
        if not self._open:
            return ""
        frame = self._frame(time.monotonic(), force=True)
        self._open = False
        return frame + "\n" if self.tty else frame
