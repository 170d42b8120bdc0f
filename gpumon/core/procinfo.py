"""User, command and parent chain of a PID via psutil, cached per (pid, start time)."""

from __future__ import annotations

import psutil

Parents = tuple[tuple[int, str], ...]  # (pid, command) of the parent, the grandparent, ... (init left out)
ProcInfo = tuple[str | None, str | None, float | None, Parents]  # user, command, create_time, parents
_UNKNOWN: ProcInfo = (None, None, None, ())
MAX_DEPTH = 12  # a parent chain deeper than this is cut (a runaway chain costs a /proc read per level)


def _command(proc: psutil.Process) -> str | None:
    cmdline = proc.cmdline()
    return " ".join(cmdline) if cmdline else proc.name()


class ProcessInfoCache:
    """NVML gives PIDs only. In a container they are host PIDs that psutil cannot
    see: those read as N/A rather than as an error.

    The parent chain is read again only when the process's parent changes (it
    re-parents when its parent dies): one read of /proc/PID/stat per sample."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[ProcInfo, int]] = {}  # pid -> (info, its parent pid then)

    def lookup(self, pid: int) -> ProcInfo:
        try:
            proc = psutil.Process(pid)
            created = proc.create_time()
            ppid = proc.ppid()
        except (psutil.Error, OSError):
            self._cache.pop(pid, None)
            return _UNKNOWN
        cached = self._cache.get(pid)
        if cached is not None and cached[0][2] == created and cached[1] == ppid:
            return cached[0]
        try:
            with proc.oneshot():
                user = proc.username()
                command = _command(proc)
        except (psutil.Error, OSError):
            user, command = None, None
        info = (user, command, created, _parents(proc))
        self._cache[pid] = (info, ppid)
        return info

    def forget_others(self, live: set[int]) -> None:
        for pid in [p for p in self._cache if p not in live]:
            del self._cache[pid]


def _parents(proc: psutil.Process) -> Parents:
    """The chain of parents, nearest first, up to (not including) init; a parent that vanished ends it."""
    chain: list[tuple[int, str]] = []
    try:
        parent = proc.parent()
        while parent is not None and parent.pid > 1 and len(chain) < MAX_DEPTH:
            chain.append((parent.pid, _command(parent) or ""))
            parent = parent.parent()
    except (psutil.Error, OSError):
        pass
    return tuple(chain)
