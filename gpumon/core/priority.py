"""A GPU process's nice value changed as htop's F7/F8 change it, refusing clearly where it is not allowed."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from gpumon.core.model import GpuProcess

NICE_MIN, NICE_MAX = -20, 19  # setpriority(2)'s range on Linux


@dataclass(frozen=True)
class Renice:
    """What F7/F8 would do to a process: its nice value now and after (``error`` when nothing can be done)."""

    pid: int
    now: int | None
    to: int | None
    error: str | None = None

    @property
    def direction(self) -> str:
        lower = self.to is not None and self.now is not None and self.to < self.now
        return "higher priority" if lower else "lower priority"


@dataclass(frozen=True)
class ReniceOutcome:
    ok: bool
    message: str


def _target(proc: GpuProcess) -> psutil.Process | str:
    """The live process ``proc`` names, or why there is none (simulated, exited, its PID reused since listed)."""
    if proc.simulated:
        return f"PID {proc.pid} is simulated: there is no process to renice"
    try:
        target = psutil.Process(proc.pid)
        if proc.create_time is not None and target.create_time() != proc.create_time:
            return f"PID {proc.pid} now belongs to another process: not reniced"
    except psutil.NoSuchProcess:
        return f"PID {proc.pid} has already exited"
    return target


def plan_renice(proc: GpuProcess, step: int) -> Renice:
    """The change F7 (``step`` -1: higher priority) or F8 (+1) asks of ``proc``, read before asking the user; a
    simulated PID, one gone or reused, another user's (the kernel would refuse) or one at the end of the range
    gets ``error`` instead."""
    target = _target(proc)
    if isinstance(target, str):
        return Renice(proc.pid, None, None, target)
    try:
        now = target.nice()
    except psutil.NoSuchProcess:
        return Renice(proc.pid, None, None, f"PID {proc.pid} has already exited")
    except psutil.AccessDenied:
        return Renice(proc.pid, None, None, _denied(proc, None, None))
    if not _is_mine(proc.pid):  # the kernel would refuse (EPERM): said now, not after a question
        return Renice(proc.pid, now, None, _denied(proc, now, None))
    to = min(NICE_MAX, max(NICE_MIN, now + step))
    if to == now:
        end = "highest priority (nice -20)" if step < 0 else "lowest priority (nice 19)"
        return Renice(proc.pid, now, None, f"PID {proc.pid} is already at the {end}")
    return Renice(proc.pid, now, to)


def renice(proc: GpuProcess, to: int) -> ReniceOutcome:
    """Set ``proc``'s nice value to ``to``, unless its PID was reused since it was listed."""
    target = _target(proc)
    if isinstance(target, str):
        return ReniceOutcome(False, target)
    now: int | None = None
    try:
        now = target.nice()
        target.nice(to)
    except psutil.NoSuchProcess:
        return ReniceOutcome(False, f"PID {proc.pid} has already exited")
    except psutil.AccessDenied:  # psutil's for EPERM and EACCES
        return ReniceOutcome(False, _denied(proc, now, to))
    return ReniceOutcome(True, f"PID {proc.pid}: nice {now} → {to}")


def _denied(proc: GpuProcess, now: int | None, to: int | None) -> str:
    """One line: why the kernel says no (EPERM: another user's process; EACCES: a lower nice value needs
    privilege) and what to do. psutil's AccessDenied carries no errno: the case is told by who owns the process
    and which way the value moves."""
    if not _is_mine(proc.pid):
        owner = f" ({proc.user}'s)" if proc.user else ""
        return f"cannot renice PID {proc.pid}{owner}: permission denied; run gpumon as root or as that user"
    if now is not None and to is not None and to < now:
        return (
            f"cannot renice PID {proc.pid} from {now} to {to}: a lower nice value (higher priority) needs root"
            " (CAP_SYS_NICE, or RLIMIT_NICE)"
        )
    return f"cannot renice PID {proc.pid}: permission denied; run gpumon as root"


def _is_mine(pid: int) -> bool:
    """Whether this process's user owns ``pid`` (root owns every one, as the kernel sees it for renice)."""
    if os.geteuid() == 0:
        return True
    try:
        return psutil.Process(pid).uids().real == os.geteuid()
    except psutil.Error:
        return False
