"""torchrun's own word on which worker failed first, read from the run's ``logs/launcher.log`` as it is written.

When a worker dies, torchrun's agent logs (torch/distributed/elastic/multiprocessing/api.py,
``SubprocessContext._poll``; ``MultiprocessContext`` says ``of fn:`` instead of ``of binary:``)::

    E1206 19:46:36.789000 4248 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9)
    local_rank: 1 (pid: 4252) of binary: /usr/bin/python3

(one line). That is the only record of a rank killed by a signal or ended by ``sys.exit(3)``: such a rank writes
no exception, and its peers are often SIGTERMed before they record theirs. The supervisor follows the log from
its offset (never re-read), a bounded number of bytes a poll, and writes each such line as a ``worker_exit``
event; attempts.py folds it into the attempt whose rank had that pid.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from gpumon.core.safefs import NotRegular, open_regular

# The one place torchrun's line is matched (torch 2.13's api.py; the same words since torch 1.9). The glog-style
# prefix (level, month and day, local time) is torch's own log format: where a user's logging config dropped it,
# the event's time is when gpumon read the line.
FAILED = re.compile(
    rb"(?:[EWI](?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?) .*?)?"
    rb"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\) of (?:binary|fn): "
)
POLL_BYTES = 1 << 20  # read at most this much a poll: a flooded launcher.log is caught up over several polls
LONGEST = 64 * 1024  # a longer line is no torchrun log line: dropped, not held


def signal_name(exitcode: int) -> str | None:
    """ "SIGKILL" for exit code -9 (Python's way of saying a child died of a signal); None for an exit."""
    try:
        return signal.Signals(-exitcode).name if exitcode < 0 else None
    except ValueError:
        return f"signal {-exitcode}"


def parse(line: bytes, now: float) -> dict[str, Any] | None:
    """The ``worker_exit`` fields of one torchrun line, or None when it is not the failure line."""
    found = FAILED.search(line)
    if found is None:
        return None
    code = int(found["code"])
    fields: dict[str, Any] = {"worker_pid": int(found["pid"]), "local_rank": int(found["local"]), "exitcode": code}
    fields["signal"] = signal_name(code)
    at = _logged_at(found["md"], found["hms"], now) if found["md"] else None
    if at is not None:
        fields["at"] = at
    return fields


def _logged_at(md: bytes, hms: bytes, now: float) -> float | None:
    """The prefix's local time (month, day, no year) as epoch seconds: the year that puts it nearest ``now``."""
    try:
        month, day = int(md[:2]), int(md[2:])
        hour, minute, sec = hms.decode().split(":")
        year = time.localtime(now).tm_year
        best = None
        for y in (year - 1, year, year + 1):  # a line logged on 31 Dec and read on 1 Jan
            t = time.mktime((y, month, day, int(hour), int(minute), 0, 0, 0, -1)) + float(sec)
            best = t if best is None or abs(t - now) < abs(best - now) else best
        return best
    except (ValueError, OverflowError):
        return None


class WorkerExits:
    """Follows one run's launcher.log from where it stopped; ``poll`` writes the failure lines as events."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "logs" / "launcher.log"
        self.offset = 0
        self.partial = b""

    def poll(self, events: Any) -> int:
        """Read what is new (at most POLL_BYTES), write a ``worker_exit`` per failure line; how many were written."""
        try:
            fd = open_regular(self.path)
        except (OSError, NotRegular):
            return 0  # not there yet (or not a file we read): the next poll looks again
        try:
            chunk = os.pread(fd, POLL_BYTES, self.offset)
        except OSError:
            return 0
        finally:
            os.close(fd)
        self.offset += len(chunk)
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > LONGEST:
            self.partial = b""
        written = 0
        now = time.time()
        for line in lines:
            if b"failed (exitcode" in line and (fields := parse(line, now)) is not None:
                events.write("worker_exit", **fields)
                written += 1
        return written
