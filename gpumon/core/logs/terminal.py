"""A log line as a terminal shows it: ``\\r`` returns to the line's start and what follows overwrites.

A progress bar (tqdm) writes frame after frame separated by ``\\r`` and a newline only when it closes,
so one "line" of the file holds every frame. A terminal shows the latest frame, plus the tail of an
earlier, longer frame when the latest does not cover it. ``TermLine`` keeps exactly that, fed piece by
piece (a follower reading bounded chunks), in at most ``cap`` characters whatever the line's length.
"""

from __future__ import annotations

CAP = 64 * 1024  # characters held of one line: its tail past that (a screen shows one row anyway)


class TermLine:
    """One line being drawn: its visible text and the cursor's column."""

    __slots__ = ("cap", "carriage", "col", "text")

    def __init__(self, cap: int = CAP) -> None:
        self.cap = cap
        self.text = ""
        self.col = 0
        self.carriage = False  # a ``\r`` was seen (the line is a redrawn one: its padding is trimmed)

    def feed(self, data: str) -> None:
        """Write ``data`` (no newline in it) at the cursor."""
        parts = data.split("\r")
        if len(parts) > 1:
            self.carriage = True
            self._write(parts[0])
            self.col = 0
            # Frames before the last that are no longer than it leave nothing visible: skip their writes.
            last = parts[-1]
            for part in parts[1:-1]:
                if len(part) > len(last):
                    self._write(part)
                self.col = 0
            self._write(last)
        else:
            self._write(data)

    def _write(self, part: str) -> None:
        if not part:
            return
        col = self.col
        self.text = self.text[:col] + part + self.text[col + len(part) :]
        self.col = col + len(part)
        if len(self.text) > self.cap:  # its tail only: the head of a 50 MB line is never shown
            cut = len(self.text) - self.cap
            self.text = self.text[cut:]
            self.col = max(0, self.col - cut)

    def shown(self) -> str:
        return self.text.rstrip(" ") if self.carriage else self.text


def render(text: str, cap: int = CAP) -> str:
    """``text`` (one line, no newline) as a terminal shows it."""
    if "\r" not in text:
        return text if len(text) <= cap else text[-cap:]
    line = TermLine(cap)
    line.feed(text)
    return line.shown()


def whole_frames(raw: bytes) -> bytes:
    """A line's bytes read from inside it: from its first ``\\r`` on (the cut frame before it would be drawn
    at the wrong column); all of it when it has none."""
    cr = raw.find(b"\r")
    return raw[cr:] if cr >= 0 else raw
