"""Every thread's Python stack on request, with no change to the script: ``faulthandler`` on SIGUSR2.

The bootstrap registers it in each Python process of a run. faulthandler writes from a C signal handler,
so a rank blocked in a C call (a gloo/NCCL collective, a sleep, a read) still prints where it is. The file,
``<run dir>/stacks/<pid>.txt``, stays open for the process's life; its existence tells the supervisor the
process answers SIGUSR2 (to any other process SIGUSR2's default action is to end it, so it is never sent
there). A script that handles SIGUSR2 itself keeps its handler: a handler set later (a requeue or checkpoint
hook) renames the file to ``<pid>.taken``, so the supervisor never sends it a signal meant for gpumon.
A forked child (a DataLoader worker) keeps the registration and writes into its parent's file: the
supervisor signals it only after the parent's dump, one child at a time, when the parent waits for data.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import functools
import os
import signal
from pathlib import Path
from typing import IO, Any

from gpumon.core.protocol import STACK_SIGNAL, STACKS_DIR, TAKEN, stack_path  # shared with the supervisor
from gpumon.core.safefs import open_own, private_dirs

_file: IO[str] | None = None  # kept open: faulthandler writes to its descriptor from the signal handler
_path: str | None = None
_inherited: str | None = None  # a forked child's stacks folder: it writes into its parent's file


def install(run_dir: str | None) -> bool:
    """Register the dump in this process; True when it did."""
    global _file, _path
    if run_dir is None or _file is not None:
        return False
    if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
        return False  # the script's (or a framework's) own SIGUSR2 handler stays
    directory = os.path.join(run_dir, STACKS_DIR)
    private_dirs(directory)
    _path = stack_path(run_dir, os.getpid())
    fd = open_own(Path(_path), os.O_WRONLY | os.O_APPEND)  # never through a planted link, never a FIFO
    _file = os.fdopen(fd, "w")
    faulthandler.register(STACK_SIGNAL, file=_file, all_threads=True, chain=False)
    os.register_at_fork(after_in_child=_forked)
    atexit.register(_tidy)
    _watch_handler()
    return True


def _tidy() -> None:
    """At a normal exit an empty file goes: a spawned DataLoader worker per epoch would leave one each."""
    with contextlib.suppress(OSError):
        if _path is not None and os.path.getsize(_path) == 0:
            os.unlink(_path)


def _watch_handler() -> None:
    """The script's own SIGUSR2 handler, set after ours, replaces faulthandler's (sigaction): from then on the
    signal is the script's (Slurm/SGE jobs use it to checkpoint or requeue), so the file is renamed and the
    supervisor leaves the process to py-spy. Never ``unregister`` here: it would restore SIG_DFL over theirs."""
    original = signal.signal
    if getattr(original, "_gpumon", False):
        return

    @functools.wraps(original)
    def watched(signalnum: Any, handler: Any) -> Any:
        previous = original(signalnum, handler)
        if signalnum == STACK_SIGNAL:
            _give_up()
        return previous

    watched._gpumon = True  # type: ignore[attr-defined]
    signal.signal = watched


def _give_up() -> None:
    global _path, _inherited
    with contextlib.suppress(OSError):
        if _path is not None:
            os.replace(_path, _path[: -len(".txt")] + TAKEN)
        elif _inherited is not None:  # a forked child says so in a file of its own
            os.close(open_own(Path(_inherited, f"{os.getpid()}{TAKEN}"), os.O_WRONLY))
    _path = _inherited = None


def _forked() -> None:
    """A forked child (a DataLoader worker) keeps faulthandler and the parent's descriptor (O_APPEND): the
    supervisor signals it only after its parent answered, alone, so the two dumps never mix. It never
    renames the parent's file; it has none of its own (a worker per epoch would leave a file each)."""
    global _path, _inherited
    if _path is not None:
        _inherited = os.path.dirname(_path)
    _path = None
