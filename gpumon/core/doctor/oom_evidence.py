"""Whether the kernel's OOM killer sent a run's SIGKILL: only what can be shown counts.

A SIGKILL leaves no traceback and carries no sender. The OOM killer is named only with evidence: the kernel
log naming one of the run's pids (where this user may read it), a rise of the cgroup's ``memory.events``
``oom_kill`` count during the run (the supervisor records it at start and end), or host memory near its
limit in the run's last samples. Otherwise a ``kill -9``, a scheduler or a container runtime is as likely.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

_KERNEL_OOM = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (\d+)|oom-kill:.*\bpid=(\d+)")
NEAR_LIMIT = 0.9  # the run's last RSS at or above this share of the memory limit counts as evidence


def oom_kill_count(pid: int | str = "self") -> int | None:
    """The ``oom_kill`` count of the process's memory cgroup: v2's ``memory.events``, else v1's
    ``memory.oom_control``; None where unreadable."""
    for file, mount in (("memory.events", "/sys/fs/cgroup"), ("memory.oom_control", "/sys/fs/cgroup/memory")):
        path = _cgroup(pid, v1=file.endswith("control"))
        try:
            events = Path(mount, path.lstrip("/"), file).read_text() if path is not None else ""
        except OSError:
            continue
        if found := re.search(r"^oom_kill (\d+)$", events, re.M):
            return int(found.group(1))
    return None


def _cgroup(pid: int | str, v1: bool) -> str | None:
    """The process's cgroup path: v2's "0::" line, or v1's memory controller's."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = [*line.split(":", 2), "", ""][:3]
        if (v1 and "memory" in controllers.split(",")) or (not v1 and number == "0" and not controllers):
            return path
    return None


def kernel_oom_lines(pids: Iterable[int], kmsg: str = "/dev/kmsg") -> tuple[str, ...]:
    """The kernel log's OOM-kill lines that name one of ``pids``; () where the log cannot be read."""
    wanted = set(pids)
    if not wanted:
        return ()
    found: list[str] = []
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ()
    try:
        while True:
            try:
                record = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                break  # read to the end of the ring buffer
            except OSError:
                continue  # EPIPE: records overwritten while reading
            if not record:
                break
            for line in record.splitlines():  # one record per read from /dev/kmsg: "6,1234,5678,-;message"
                message = line.split(";", 1)[-1].strip()
                if (m := _KERNEL_OOM.search(message)) and int(m.group(1) or m.group(2)) in wanted:
                    found.append(message[:300])
    finally:
        os.close(fd)
    return tuple(found[-2:])


def oom_evidence(status: Mapping[str, Any], pids: Iterable[int], rss: int | None) -> tuple[str, ...]:
    """The lines that show the OOM killer ended the run; () when nothing does."""
    lines = list(kernel_oom_lines(pids))
    counts = status.get("oom_kill")
    start, end = (counts.get("start"), counts.get("end")) if isinstance(counts, Mapping) else (None, None)
    if isinstance(start, int) and isinstance(end, int) and end > start:
        lines.append(f"the cgroup's memory.events oom_kill rose from {start} to {end}")
    limit = memory_limit()
    if rss is not None and limit and rss >= NEAR_LIMIT * limit:
        lines.append(f"the run's last RSS was {rss / 2**30:.2f} GiB of a {limit / 2**30:.2f} GiB limit")
    return tuple(lines)


def memory_limit() -> int | None:
    """This host's memory, or the memory cgroup's limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) if lower."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    limits = [total]
    for file, mount, v1 in (
        ("memory.max", "/sys/fs/cgroup", False),
        ("memory.limit_in_bytes", "/sys/fs/cgroup/memory", True),
    ):
        path = _cgroup("self", v1)
        try:
            value = Path(mount, path.lstrip("/"), file).read_text().strip() if path is not None else ""
        except OSError:
            continue
        limits += [int(value)] if value.isdigit() else []
    return min(limits)
