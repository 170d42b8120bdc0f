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
    see: those read as N/A rather than as an error. In a PID namespace of our own
    a host PID may name another process here: core/owners.py then blanks what
    this read and says to run with --pid=host.

    Each sample reads /proc/PID/stat once (parent and start time, a fifth of what
    psutil costs); user, command and the parent chain are read again only when
    those change: another process under a reused PID, or a new parent (a process
    re-parents when its parent dies)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[ProcInfo, tuple[int, float]]] = {}  # pid -> (info, (ppid, start) then)

    def lookup(self, pid: int) -> ProcInfo:
        stat = _stat(pid)
        cached = self._cache.get(pid)
        if stat is not None and cached is not None and cached[1] == stat:
            return cached[0]
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                created = proc.create_time()
                stat = stat or (proc.ppid(), created)  # no /proc (not Linux): psutil's reading
        except (psutil.Error, OSError):
            self._cache.pop(pid, None)
            return _UNKNOWN
        if cached is not None and cached[1] == stat:
            return cached[0]
        try:
            with proc.oneshot():
                user = proc.username()
                command = _command(proc)
        except (psutil.Error, OSError):
            user, command = None, None
        info = (user, command, created, _parents(proc))
        self._cache[pid] = (info, stat)
        return info

    def forget_others(self, live: set[int]) -> None:
        for pid in [p for p in self._cache if p not in live]:
            del self._cache[pid]


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, start time in clock ticks since boot) from /proc/PID/stat; None without /proc or the PID."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rfind(b")") + 2 :].split()  # after the command name, which may hold spaces
        return int(fields[1]), float(fields[19])
    except (OSError, ValueError, IndexError):
        return None


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
