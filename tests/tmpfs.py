"""A small real tmpfs for the state dir (root only): how the full-disk tests fill a disk for real."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "4m") -> Iterator[Path]:
    """Mount a ``size`` tmpfs at ``where`` (made here) for the test's life; skip where it cannot be mounted."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for the state dir needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(mount: Path, leave: int = 0, name: str = "filler") -> Path:
    """A file that takes all the space of ``mount`` but ``leave`` bytes (what else the user keeps there)."""
    stat = os.statvfs(mount)
    filler = mount / name
    with open(filler, "ab", buffering=0) as f:
        try:
            f.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
        except OSError as err:  # an ended run's supervisor still writing its last files took some meanwhile
            if err.errno != errno.ENOSPC or leave:
                raise
        if leave == 0:  # the last partial blocks too
            with contextlib.suppress(OSError):
                f.write(b"\0" * (1 << 16))
                f.flush()
    return filler
