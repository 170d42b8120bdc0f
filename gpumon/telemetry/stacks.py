"""Every thread's Python stack on request, with no change to the script: ``faulthandler`` on SIGUSR2.

The bootstrap registers it in each Python process of a run. faulthandler writes from a C signal handler,
so a rank blocked in a C call (a gloo/NCCL collective, a sleep, a read) still prints where it is. The file,
``<run dir>/stacks/<pid>.txt``, stays open for the process's life; its existence tells the supervisor the
process answers SIGUSR2 (to any other process SIGUSR2's default action is to end it, so it is never sent
there). A script that handles SIGUSR2 itself keeps its handler: nothing is registered then.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
from typing import IO

STACKS_DIR = "stacks"
STACK_SIGNAL = signal.SIGUSR2  # free in gpumon (the supervisor's own SIGUSR1 is a kill request)

_file: IO[str] | None = None  # kept open: faulthandler writes to its descriptor from the signal handler


def stack_path(run_dir: str, pid: int) -> str:
    return os.path.join(run_dir, STACKS_DIR, f"{pid}.txt")


def install(run_dir: str | None) -> bool:
    """Register the dump in this process; True when it did."""
    global _file
    if run_dir is None or _file is not None:
        return False
    if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
        return False  # the script's (or a framework's) own SIGUSR2 handler stays
    directory = os.path.join(run_dir, STACKS_DIR)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd = os.open(stack_path(run_dir, os.getpid()), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    _file = os.fdopen(fd, "w")
    faulthandler.register(STACK_SIGNAL, file=_file, all_threads=True, chain=False)
    os.register_at_fork(after_in_child=_forked)
    return True


def _forked() -> None:
    """A forked child (a DataLoader worker) has no file of its own: it must not write into its parent's, and
    no one signals it, so the registration is dropped."""
    global _file
    with contextlib.suppress(RuntimeError, ValueError):
        faulthandler.unregister(STACK_SIGNAL)
    _file = None
