"""Reading /sys and /proc under a root that ``GPUMON_SYS_ROOT`` moves (default ``/``).

Tests and users replay a recorded machine by pointing the root at a copy of its files; ``record``
makes such a copy of every file the readers read (``gpumon snapshot --record DIR``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT_ENV = "GPUMON_SYS_ROOT"


def sys_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or "/")


class SysFiles:
    """Reads files under the root (paths written as on the machine, "/sys/..."); remembers what it read."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else sys_root()
        self.used: set[str] = set()
        # a recording, not this machine: its PIDs are never signalled and its UIDs not named from our passwd
        self.replayed = self.root.resolve() != Path("/")
        self._prefix = str(self.root).rstrip("/")  # plain strings: pathlib cost more than the reads (~190 a tick)

    def path(self, path: str) -> str:
        return self._prefix + "/" + path.lstrip("/")

    def text(self, path: str) -> str | None:
        """The file's text, or None where it is absent or unreadable (a field the driver does not offer)."""
        try:
            with open(self.path(path), "rb") as f:
                data = f.read().decode(errors="replace")
        except OSError:
            return None
        self.used.add(path)
        return data

    def integer(self, path: str) -> int | None:
        data = self.text(path)
        try:
            return None if data is None else int(data.strip().split()[0])
        except (ValueError, IndexError):
            return None

    def readlink(self, path: str) -> str | None:
        """Where a link points, or None (absent, or a recording: links are not recorded)."""
        try:
            return os.readlink(self.path(path))
        except OSError:
            return None

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(path)))
        except OSError:
            return []

    def record(self, dest: str | Path) -> int:
        """Copy every file read so far into ``dest`` (the same paths under it); returns how many."""
        count = 0
        for path in sorted(self.used):
            target = Path(dest) / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(self.path(path), target)
            except OSError:
                continue  # a process ended between the read and the copy
            count += 1
        return count
