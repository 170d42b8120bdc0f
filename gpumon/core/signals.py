"""Signals to GPU processes, refusing clearly where it is unsafe or not allowed."""

from __future__ import annotations

import signal
from dataclasses import dataclass

import psutil

from gpumon.core.model import GpuProcess


@dataclass(frozen=True)
class SignalOutcome:
    ok: bool
    message: str


def send_signal(proc: GpuProcess, sig: int) -> SignalOutcome:
    name = signal.Signals(sig).name
    if proc.simulated:
        return SignalOutcome(False, f"PID {proc.pid} is simulated: nothing to send {name} to")
    try:
        target = psutil.Process(proc.pid)
        if proc.create_time is not None and target.create_time() != proc.create_time:
            return SignalOutcome(False, f"PID {proc.pid} now belongs to another process: not signalled")
        target.send_signal(sig)
    except psutil.NoSuchProcess:
        return SignalOutcome(False, f"PID {proc.pid} has already exited")
    except (psutil.AccessDenied, PermissionError):
        owner = f" (owned by {proc.user})" if proc.user else ""
        return SignalOutcome(
            False, f"Permission denied: cannot send {name} to PID {proc.pid}{owner}; run gpumon as that user or root"
        )
    return SignalOutcome(True, f"Sent {name} to PID {proc.pid}")
