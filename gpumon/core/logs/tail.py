"""The last lines of a log, read from its end in one bounded read, drawn as a terminal draws them."""

from __future__ import annotations

from pathlib import Path

from gpumon.core.logs.terminal import render, whole_frames

TAIL_BYTES = 256 * 1024


def tail_lines(path: Path, lines: int = 200, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last ``lines`` lines of a log without reading all of it; never empty when the file is not.

    Each line is its latest frame (``\\r``). A read that starts inside a line drops that cut line, unless
    it is a bar's frames (the HF Trainer's loss line after a bar's clearing) or all there is (a 50 MB line
    with no newline): then its end is the line."""
    if lines <= 0:
        return []
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except OSError:
        return []
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    if size > max_bytes and raw:  # the first line was cut: its whole frames are its end, else it goes
        if b"\r" in raw[0] or len(raw) == 1:
            raw[0] = whole_frames(raw[0])
        else:
            raw = raw[1:]
    return [render(r.decode("utf-8", "replace")) for r in raw[-lines:]]
