"""Finding a text in a log: the lines that hold it, scanned from the end backwards in bounded chunks.

The text is literal (brackets, dots and stars are themselves) and smart-case: case-insensitive unless
it holds a capital letter, as less -i and vim's smartcase. A scan reads one ``CHUNK`` at a time and
yields after each, so its owner shows progress and can stop it; it keeps the offsets of at most
``LIMIT`` matching lines (the newest), so neither memory nor a chunk grows with the file. The newest
lines come first because a log is read from its end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1024 * 1024
LIMIT = 100_000  # matching lines kept; a scan stops there


@dataclass(frozen=True)
class Needle:
    text: str

    @property
    def fold(self) -> bool:
        """Case-insensitive: the text has no capital letter."""
        return self.text == self.text.lower()

    def spans(self, line: str) -> list[tuple[int, int]]:
        """Where the text occurs in ``line`` (start, end), for highlighting."""
        if not self.text:
            return []
        hay, needle = (line.lower(), self.text.lower()) if self.fold else (line, self.text)
        out, pos = [], hay.find(needle)
        while pos >= 0:
            out.append((pos, pos + len(needle)))
            pos = hay.find(needle, pos + len(needle))
        return out

    def in_lines(self, lines: Sequence[str]) -> list[int]:
        """The indexes of the lines that hold the text (a buffer already in memory: a remote log's)."""
        if not self.text:
            return []
        needle = self.text.lower() if self.fold else self.text
        return [i for i, line in enumerate(lines) if needle in (line.lower() if self.fold else line)]


@dataclass(frozen=True)
class ScanStep:
    found: tuple[int, ...]  # offsets of the matching lines' starts found in this chunk, ascending
    scanned: int  # bytes scanned so far
    total: int  # bytes to scan (the file's size when the scan began)
    limited: bool = False  # the scan stopped at LIMIT matches


def scan(path: Path, needle: Needle, chunk: int = CHUNK, limit: int = LIMIT) -> Iterator[ScanStep]:
    """The matching lines' start offsets, a chunk at a time from the end backwards (each step's found
    offsets are older than the previous step's). Stops at the file's start or ``limit`` matches."""
    pattern = (needle.text.lower() if needle.fold else needle.text).encode()
    if not pattern:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        size = os.fstat(fd).st_size
        pos, count = size, 0
        while pos > 0:
            base = max(0, pos - chunk)
            data = os.pread(fd, pos - base, base)
            cut = data.find(b"\n", 0, len(data) - 1) if base > 0 else -1
            if cut >= 0:  # bytes before the first newline belong to a line the next chunk reads
                data, base = data[cut + 1 :], base + cut + 1
            found = _matches(data.lower() if needle.fold else data, pattern, base)
            if count + len(found) > limit or (count + len(found) == limit and base > 0):
                found = found[len(found) - (limit - count) :]
                yield ScanStep(tuple(found), size - base, size, limited=True)
                return
            count += len(found)
            pos = base
            yield ScanStep(tuple(found), size - base, size)
    finally:
        os.close(fd)


def _matches(hay: bytes, pattern: bytes, base: int) -> list[int]:
    """Start offsets of the lines of ``hay`` (read at ``base``) that hold ``pattern``, one per line."""
    out = []
    pos = hay.find(pattern)
    while pos >= 0:
        out.append(base + hay.rfind(b"\n", 0, pos) + 1)
        line_end = hay.find(b"\n", pos)
        if line_end < 0:
            break
        pos = hay.find(pattern, line_end + 1)
    return out
