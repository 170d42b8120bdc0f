"""User and command of a PID via psutil, cached per (pid, start time)."""

from __future__ import annotations

import psutil

ProcInfo = tuple[str | None, str | None, float | None]  # user, command, create_time
_UNKNOWN: ProcInfo = (None, None, None)


class ProcessInfoCache:
    """NVML gives PIDs only. In a container they are host PIDs that psutil cannot
    see: those read as N/A rather than as an error."""

    def __init__(self) -> None:
        self._cache: dict[int, ProcInfo] = {}

    def lookup(self, pid: int) -> ProcInfo:
        try:
            proc = psutil.Process(pid)
            created = proc.create_time()
        except (psutil.Error, OSError):
            self._cache.pop(pid, None)
            return _UNKNOWN
        cached = self._cache.get(pid)
        if cached is not None and cached[2] == created:
            return cached
        try:
            with proc.oneshot():
                user = proc.username()
                cmdline = proc.cmdline()
                command = " ".join(cmdline) if cmdline else proc.name()
        except (psutil.Error, OSError):
            user, command = None, None
        info = (user, command, created)
        self._cache[pid] = info
        return info

    def forget_others(self, live: set[int]) -> None:
        for pid in [p for p in self._cache if p not in live]:
            del self._cache[pid]
