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
    if proc.simulated:
        return SignalOutcome(False, f"PID {proc.pid} is simulated: nothing to send {signal.Signals(sig).name} to")
    if proc.foreign_pid:  # another namespace's PID: here it may be some other process
        return SignalOutcome(False, f"PID {proc.pid} is the host's, not this PID namespace's: not signalled")
    return signal_pid(proc.pid, sig, proc.create_time, proc.user)


def signal_pid(pid: int, sig: int, create_time: float | None = None, user: str | None = None) -> SignalOutcome:
    """Send ``sig`` to ``pid`` unless the PID now belongs to a process started at another time than ``create_time``."""
    name = signal.Signals(sig).name
    try:
        target = psutil.Process(pid)
        if create_time is not None and target.create_time() != create_time:
            return SignalOutcome(False, f"PID {pid} now belongs to another process: not signalled")
        target.send_signal(sig)
    except psutil.NoSuchProcess:
        return SignalOutcome(False, f"PID {pid} has already exited")
    except (psutil.AccessDenied, PermissionError):
        owner = f" (owned by {user})" if user else ""
        return SignalOutcome(
            False, f"Permission denied: cannot send {name} to PID {pid}{owner}; run gpumon as that user or root"
        )
    return SignalOutcome(True, f"Sent {name} to PID {pid}")


def parse_signal(text: str) -> signal.Signals:
    """'TERM', 'sigterm', 'SIGTERM' or '15' as a signal; ValueError with the names to use otherwise."""
    word = text.strip().upper()
    try:
        return (
            signal.Signals(int(word))
            if word.isdigit()
            else signal.Signals[word if word.startswith("SIG") else f"SIG{word}"]
        )
    except (KeyError, ValueError):
        raise ValueError(
            f"unknown signal {text!r}: use a name such as SIGTERM, SIGKILL or SIGINT, or its number"
        ) from None
