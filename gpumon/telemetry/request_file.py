"""A request file in the run's ``control/`` folder that a rank looks at from its step hook (census, pymem).

A new file (a new mtime) is a new request; requests older than the process are not its own. Looked at at most
every ``CHECK_EVERY_S``: one ``os.stat`` then, one comparison per step otherwise.
"""

from __future__ import annotations

import os

CHECK_EVERY_S = 0.25


class RequestFile:
    def __init__(self, path: str, since_ns: int) -> None:
        self.path = path
        self.served = since_ns  # the newest request seen (its mtime, in ns)
        self.next_check = 0.0

    def new(self, now: float) -> int | None:
        """A request not seen before (its id: the file's mtime in ns), or None."""
        if now < self.next_check <= now + CHECK_EVERY_S:  # (a clock set back still checks)
            return None
        self.next_check = now + CHECK_EVERY_S
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        if stat.st_mtime_ns <= self.served:
            return None
        self.served = stat.st_mtime_ns
        return self.served
