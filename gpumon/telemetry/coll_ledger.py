"""The rank's side of ``core/collective_ledger.py``: each collective's record copied into a mapped file.

Opened at the first collective (a process that calls none has no file); a forked child opens its own (its
pid's). Any failure to make the file turns the ledger off for the process: a record is never worth a failed
collective.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from pathlib import Path
from typing import Any

from gpumon.core.collective_ledger import SLOT, encode, ledger_path
from gpumon.core.protocol import STACKS_DIR
from gpumon.core.safefs import open_own, private_dirs


class Ledger:
    def __init__(self, run_dir: str | None) -> None:
        self.run_dir = run_dir
        self.map: mmap.mmap | None = None
        self.off = run_dir is None
        with contextlib.suppress(AttributeError):  # not on every platform
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.map, self.off = None, self.run_dir is None

    def _open(self) -> mmap.mmap | None:
        assert self.run_dir is not None
        try:
            private_dirs(os.path.join(self.run_dir, STACKS_DIR))
            fd = open_own(Path(ledger_path(self.run_dir, os.getpid())), os.O_RDWR)
            try:
                # Blocks taken now, not on a page's first write: a sparse page written on a full disk is a
                # SIGBUS that kills the rank (a full state dir must cost the record, never the training).
                os.posix_fallocate(fd, 0, 2 * SLOT)
                self.map = mmap.mmap(fd, 2 * SLOT)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            self.off = True
        return self.map

    def started(self, record: dict[str, Any]) -> bytes:
        """The collective about to be entered (``collectives.py``'s record): its slot's line, for ``finished``."""
        if self.off:
            return b""
        target = self.map or self._open()
        if target is None:
            return b""
        line = encode(record["op"], record["seq"], record["group"], record["bytes"], record["where"], time.time())
        target[0:SLOT] = line
        return line

    def finished(self, line: bytes) -> None:
        """The collective whose ``started`` gave ``line`` returned (an async one: its work completed)."""
        if self.map is not None and line:
            self.map[SLOT : 2 * SLOT] = line
