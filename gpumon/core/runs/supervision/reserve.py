"""Room for a run's end on a state dir that fills up.

A run that fills the disk (its logs, its checkpoints beside them, another program) would otherwise end with
nothing written: its status reads ``running`` until space comes back, and the log stops with no word of what
was lost. The supervisor writes a small reserve file when the run starts; when the end cannot be written it
deletes it and writes the end in the room it gave back, then says in each log how much output was dropped.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from gpumon.core.safefs import open_own, open_regular

RESERVE = ".end-reserve"
RESERVE_BYTES = 64 * 1024  # status.json's new copy (a few KiB), the drop notes


def reserve(run_dir: Path) -> bool:
    """Write the reserve (real blocks, not a sparse file); on a disk already too full, none (False)."""
    path = run_dir / RESERVE
    with contextlib.suppress(OSError):
        if os.lstat(path).st_blocks * 512 >= RESERVE_BYTES:  # the launcher's: kept, not rewritten on a full disk
            return True
    try:
        fd = open_own(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, b"\0" * RESERVE_BYTES)
        finally:
            os.close(fd)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()
        return False


def borrow(run_dir: Path, nbytes: int = 16 * 1024) -> bool:
    """Give ``nbytes`` of the reserve back (the runner's small exit.json with its drops), keeping the rest for
    the end itself: True when it shrank."""
    try:
        fd = open_regular(run_dir / RESERVE, os.O_WRONLY)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return False
        os.ftruncate(fd, max(0, size - nbytes))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def free_reserve(run_dir: Path) -> bool:
    """Delete the reserve: True when there was one (space was given back)."""
    try:
        (run_dir / RESERVE).unlink()
        return True
    except OSError:
        return False


def say_drops(run_dir: Path, dropped: dict[str, list[int]]) -> None:
    """A last line in each log whose dropped output it never mentioned (the disk stayed full to the end)."""
    from gpumon.core.runs.supervision.output import _size

    for name, (_total, unsaid) in dropped.items():
        if not unsaid or "/" in name:
            continue
        note = f"\n[gpumon: {_size(unsaid)} of output dropped here, to the end: the state dir was full]\n"
        with contextlib.suppress(OSError):
            fd = open_regular(run_dir / "logs" / name, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, note.encode())
            finally:
                os.close(fd)


def write_end(sup: Any) -> None:
    """A run's end, by its supervisor or an adopter (``sup``, its status already updated): written, else
    written in the room the reserve gives back; then the drops no log could say; still full: wait for space."""
    if sup.save() or (free_reserve(sup.run_dir) and sup.save()):
        say_drops(sup.run_dir, sup.dropped)  # after the end itself: the end first, in what room there is
    if sup.unsaved is not None:
        sup.flush()  # still full: the end waits here (SIGTERM ends the wait), not lost
    free_reserve(sup.run_dir)
