"""Requests to a running search, as files in its run directory (no socket, no signal).

The app or the CLI writes them; the search's Tune stopper (``gpumon.tune.stopper``)
reads them between results. ``control/stop`` asks the whole experiment to stop;
``control/stop-trials`` holds one trial id per line. Tune then ends the trials
itself, so their results and checkpoints stay in the run directory.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpumon.core.protocol import CONTROL_DIR, control_dir
from gpumon.core.safefs import open_own, read_bytes

STOP_ALL = "stop"
STOP_TRIALS = "stop-trials"


def request_stop_experiment(run_dir: str | os.PathLike[str]) -> None:
    """The flag, holding the time of the first request (the clock the events' times are on)."""
    flag = control_dir(run_dir) / STOP_ALL
    try:
        fd = os.open(flag, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # asked before: that time stays
        return
    try:
        os.write(fd, f"{time.time()!r}\n".encode())
    finally:
        os.close(fd)


def request_stop_trial(run_dir: str | os.PathLike[str], trial_id: str) -> None:
    if not trial_id or "\n" in trial_id:
        raise ValueError(f"not a trial id: {trial_id!r}")
    fd = open_own(control_dir(run_dir) / STOP_TRIALS, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, f"{trial_id}\n".encode())
    finally:
        os.close(fd)


def stop_requested(run_dir: str | os.PathLike[str]) -> bool:
    return (Path(run_dir) / CONTROL_DIR / STOP_ALL).exists()


def stop_requested_at(run_dir: str | os.PathLike[str]) -> float | None:
    """When the whole search was first asked to stop, or None: a trial Tune ended after then was stopped by
    the user, one ended before finished by itself. (A file's mtime is coarser than the events' clock.)"""
    flag = Path(run_dir) / CONTROL_DIR / STOP_ALL
    try:
        text, mtime = read_bytes(flag).decode(errors="replace"), flag.stat().st_mtime
    except OSError:
        return None
    try:
        return float(text)
    except ValueError:  # empty: an older gpumon's flag
        return mtime


def trials_to_stop(run_dir: str | os.PathLike[str]) -> frozenset[str]:
    try:
        text = read_bytes(Path(run_dir) / CONTROL_DIR / STOP_TRIALS).decode(errors="replace")
    except OSError:
        return frozenset()
    return frozenset(line.strip() for line in text.splitlines() if line.strip())
