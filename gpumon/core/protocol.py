"""The files and signals a run's processes and its supervisor share, beside the event protocol (events.py).

The ground floor: the supervisor, the doctor, the CLI and the TUI write or read these names, and the
telemetry inside each rank (gpumon/telemetry/) answers them, so both import them from here and neither
imports the other. docs/events.md describes the events; this module the rest of what crosses the line:

- ``control/`` in the run directory holds requests, as files (no socket, no signal a script could lack a
  handler for): ``census`` asks every rank for a census (its mtime is the request's id, its text the gap
  in steps), ``pymem`` asks ranks for a tracemalloc window (its text: the steps, then the ranks), ``stop``
  and ``stop-trials`` ask a search to stop (runs/supervision/control.py).
- ``stacks/<pid>.txt`` is a process's open ``faulthandler`` file: its existence says the process answers
  ``STACK_SIGNAL`` with every thread's stack; ``<pid>.taken`` says the script took that signal back.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpumon.core.safefs import write_atomic

CONTROL_DIR = "control"
CENSUS_FLAG = "census"
DEFAULT_GAP = 20  # steps between the two censuses of a request
PYMEM_FLAG = "pymem"  # a tracemalloc window's request (telemetry/pymem.py)
PYMEM_STEPS = 20  # steps between its two snapshots
KEPT_STEPS = 3  # a graph reaching further back than this many steps' nodes was kept (by the rank and the doctor)

STACKS_DIR = "stacks"
STACK_SIGNAL = signal.SIGUSR2  # free in gpumon (the supervisor's own SIGUSR1 is a kill request)
TAKEN = ".taken"  # the suffix of a process's file once the script set its own SIGUSR2 handler


def control_dir(run_dir: str | os.PathLike[str]) -> Path:
    """The run's ``control/`` folder (private), made if needed; where census and stop requests go."""
    path = Path(run_dir) / CONTROL_DIR
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def census_flag(run_dir: str | os.PathLike[str]) -> Path:
    """Where a census request is (``control/census``), without making the folder."""
    return Path(run_dir) / CONTROL_DIR / CENSUS_FLAG


def request_census(run_dir: str | os.PathLike[str], gap: int = DEFAULT_GAP) -> int:
    """Ask every rank of the run for two censuses ``gap`` steps apart; returns the request id (mtime ns)."""
    folder = control_dir(run_dir)
    write_atomic(folder / CENSUS_FLAG, f"{max(1, int(gap))}\n".encode())  # a new inode and mtime: a new request
    return (folder / CENSUS_FLAG).stat().st_mtime_ns


def request_pymem(run_dir: str | os.PathLike[str], ranks: Iterable[int] = (), steps: int = PYMEM_STEPS) -> int:
    """Ask ``ranks`` (none: every rank) for a tracemalloc window of ``steps`` steps; returns its id (mtime ns)."""
    folder = control_dir(run_dir)
    words = " ".join(str(int(w)) for w in (max(1, int(steps)), *sorted(set(ranks))))
    write_atomic(folder / PYMEM_FLAG, f"{words}\n".encode())
    return (folder / PYMEM_FLAG).stat().st_mtime_ns


def stack_path(run_dir: str, pid: int) -> str:
    """A process's stack file: ``<run dir>/stacks/<pid>.txt``."""
    return os.path.join(run_dir, STACKS_DIR, f"{pid}.txt")


def census_group(group: Mapping[str, Any]) -> tuple[Any, ...]:
    """A census group's identity from one look to the next (the rank's ``released``, the doctor's diff)."""
    return (tuple(group.get("shape") or ()), group.get("dtype"), group.get("device"), group.get("grad_fn"),
            bool(group.get("requires_grad")))  # fmt: skip
