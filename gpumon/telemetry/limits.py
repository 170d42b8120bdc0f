"""The memory limits that apply to this process, read once when it becomes a rank (``proc_start``'s ``limits``).

The lowest of them is the ceiling its memory is projected against (the doctor's ceiling.py): the soft
``RLIMIT_AS`` (virtual size) and ``RLIMIT_DATA`` (heap and private mappings), its cgroup's
``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1), and the host's physical memory. Only what is
set is written; reading costs one getrlimit each and a few small files.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as a page-rounded LLONG_MAX


def _rlimit(name: str) -> int | None:
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    try:
        soft, _ = resource.getrlimit(getattr(resource, name))
    except (OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max": none
    value = int(text)
    return value if value < _UNLIMITED else None


def cgroup_limit(proc_cgroup: str, root: Path = CGROUP_ROOT) -> tuple[int, str] | None:
    """(bytes, file) of the lowest memory limit on this process's cgroup path, v2 then v1; None when none.

    A limit on a parent cgroup binds too, so the path is walked up to the mount's root. In a container the
    path may not exist under the mount (a cgroup namespace shows "/"): then the root's own file counts.
    """
    found: list[tuple[int, str]] = []
    for line in proc_cgroup.splitlines():
        ident, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if ident == "0" and controllers == "":
            mounts, name = [root, root / "unified"], "memory.max"
        elif "memory" in controllers.split(","):
            mounts, name = [root / "memory"], "memory.limit_in_bytes"
        else:
            continue
        for mount in mounts:
            here = mount / path.strip("/")
            while True:
                value = _read_limit(here / name)
                if value is not None:
                    found.append((value, name))
                if here == mount or mount not in here.parents:
                    break
                here = here.parent
    return min(found) if found else None


def read_limits() -> dict[str, object]:
    """What caps this process's memory: ``as``, ``data`` (soft rlimits), ``cgroup`` with ``cgroup_file``,
    ``host`` (physical memory), and ``vm`` (its virtual size now: what already counts against ``as``)."""
    out: dict[str, object] = {}
    for key, name in (("as", "RLIMIT_AS"), ("data", "RLIMIT_DATA")):
        if (value := _rlimit(name)) is not None:
            out[key] = value
    with contextlib.suppress(OSError):
        cgroup = cgroup_limit(Path("/proc/self/cgroup").read_text())
        if cgroup is not None:
            out["cgroup"], out["cgroup_file"] = cgroup
    with contextlib.suppress(ValueError, OSError, AttributeError):
        out["host"] = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if "as" in out:
        with contextlib.suppress(OSError, ValueError, IndexError):
            out["vm"] = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    return out
