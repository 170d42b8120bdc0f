"""A capped log's latest output while its run lives: ``<log>.live``, rewritten whole at most once a second.

Past its cap a log keeps its head and, when the run ends, its tail; in between, the supervisor publishes
the latest output here, so the log's readers (``gpumon logs -f`` and ``-n``, the Runs view, the doctor, an
alert's quote) see the run as it is now, not where its log was cut. The first line says which bytes of the
output past the cap it holds: ``gpumon-live FIRST END`` (``final`` added when the run's output ended).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from gpumon.core.safefs import open_regular

SUFFIX = ".live"
EVERY_S = 1.0  # rewritten at most this often
LIVE_BYTES = 1024 * 1024  # the latest output held: a flood costs at most this much written a second
_HEADER = 64


@dataclass(frozen=True)
class Live:
    """What ``<log>.live`` holds: bytes ``first`` to ``end`` of the output past the cap."""

    first: int
    end: int
    final: bool
    start: int  # where the body begins in the file


def live_path(log: Path) -> Path:
    return log.with_name(log.name + SUFFIX)


def publish(log: Path, first: int, body: bytes, final: bool) -> None:
    """Replace ``<log>.live`` in one step (readers see the old or the new, whole); never raises: a full
    disk costs the live view, never the run."""
    path = live_path(log)
    tmp = path.with_name(path.name + ".tmp")
    header = f"gpumon-live {first} {first + len(body)}{' final' if final else ''}\n".encode()
    with contextlib.suppress(OSError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # whatever is there (a planted link): never written through
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(header + body)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)  # a link planted at ``path`` is replaced, not followed


def read(log: Path, since: int | None, limit: int) -> tuple[Live, bytes] | None:
    """At most ``limit`` bytes of the output past the cap from ``since`` on (from the oldest held when
    ``since`` is older; the last ``limit`` when None), with the header they were read under; None when
    there is no ``<log>.live`` (the log never reached its cap) or it is not ours."""
    try:
        fd = open_regular(live_path(log))
    except OSError:
        return None
    try:
        live = _parse(os.pread(fd, _HEADER, 0))
        if live is None:
            return None
        since = min(max(live.end - limit if since is None else since, live.first), live.end)
        return live, os.pread(fd, min(limit, live.end - since), live.start + since - live.first)
    except OSError:
        return None
    finally:
        os.close(fd)


def _parse(head: bytes) -> Live | None:
    line, newline, _ = head.partition(b"\n")
    words = line.split()
    if not newline or len(words) not in (3, 4) or words[0] != b"gpumon-live":
        return None
    try:
        first, end = int(words[1]), int(words[2])
    except ValueError:
        return None
    if not 0 <= first <= end:
        return None
    return Live(first, end, len(words) == 4 and words[3] == b"final", len(line) + 1)
