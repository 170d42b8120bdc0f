"""What every command shares: a user's mistake in one line (exit 2), whole-number arguments, tables, log following.

Imports nothing from the other command modules, so each of them can import it.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def fail(message: str) -> int:
    """A user's mistake: one line on stderr; the command returns the exit code, 2."""
    from gpumon.core.visible import visible

    print(f"gpumon: error: {visible(message)}", file=sys.stderr)  # it may quote a run's name or a user's input
    return 2


def whole(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes a whole number, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows of cells, the first the header, in left-aligned columns two spaces apart; a cell's control
    characters shown as text (a run's name is not ours: an escape in it must not reach the terminal)."""
    from gpumon.core.visible import visible

    rows = [[visible(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def announce_start(record: Any, what: str, follow_log: bool) -> int:
    """After ``launch``/``tune`` started ``what`` ("run", "search"): its log, a warning if it ended at once,
    then its state and id on the last line (for scripts); with ``follow_log``, rank 0's log until it ends."""
    print(f"logs:    gpumon logs {record.id} --follow")
    if record.state in ("failed", "lost"):
        print(f"gpumon: the {what} ended at once ({record.state}); see: gpumon logs {record.id}", file=sys.stderr)
    print(f"{record.state} {record.id}", flush=True)
    return follow(record.id, 0, 0, from_start=True) if follow_log else 0  # what it printed before we looked too


def follow(run_id: str, log: int | Path | None, first: int, from_start: bool = False) -> int:
    """Print the log as it grows until the run has ended and nothing more comes: a progress bar redrawn in
    place on a terminal, its latest frame a few times a second into a pipe; read in bounded chunks.
    ``from_start``: from the log's start (a run just launched), not from its ``first`` last lines."""
    from gpumon.core.logs import live as past_cap
    from gpumon.core.logs.follow import LogFollower
    from gpumon.core.logs.tail import tail_lines
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.safefs import open_regular
    from gpumon.core.visible import visible_log

    store = RunStore()
    record = store.resolve(run_id)
    path = log if isinstance(log, Path) else record.log_path(log)  # a rank's log, the launcher's, or a path
    try:
        with os.fdopen(open_regular(path), "rb") as fh:  # never waits on a FIFO planted in its place
            offset = fh.seek(0, os.SEEK_END)
            ends_open = offset > 0 and fh.seek(offset - 1) >= 0 and fh.read(1) != b"\n"
    except OSError:
        offset, ends_open = 0, False
    if from_start:
        offset, ends_open, first = 0, False, 0
    tty = sys.stdout.isatty()
    last = None if from_start else past_cap.read(path, None, 1)  # past its cap: shown and followed from <log>.live
    held = last[0] if last is not None else None
    if last is not None and not last[0].final:
        ends_open = last[1] not in (b"", b"\n")
    follower = LogFollower(path, offset, tty=tty, past_cap=held.end if held else None)
    lines = tail_lines(path, first) if first else []
    if ends_open and lines:  # the last line is still being drawn (a bar): the follower goes on with it
        lines, partial = lines[:-1], lines[-1]
    else:
        partial = None
    for line in lines:
        sys.stdout.write(visible_log(line, colour=tty) + "\n")
    if partial is not None:
        sys.stdout.write(follower.resume(partial))
    sys.stdout.flush()
    while True:
        live = record.live
        wrote = False
        for text in follower.poll():
            if text:
                sys.stdout.write(text)
                sys.stdout.flush()
                wrote = True
        if not wrote and not live:
            sys.stdout.write(follower.close())
            print(f"[{record.id} {record.state}, exit code {record.exit_code}]")
            return 0
        if not wrote and _reader_gone():  # ssh went away: a quiet run's follower would otherwise stay
            return 0
        time.sleep(0.2)
        record = store.load(record.dir) or record


def _reader_gone() -> bool:
    """stdout is a pipe or socket whose reader closed its end (seen without writing to it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # no events asked: hang-up and error are always reported
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout): never gone
        return False
