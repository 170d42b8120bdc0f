"""Every process of a run carries its mark: ``GPUMON_RUN_DIR`` in its environment (the launcher sets it; every
child inherits it, whatever session or process group it moves to). ``marked`` finds them without the
supervisor's memory: a helper that double-forked into its own session, or one started before the first scan.

Reading another process's environment is allowed for the same user (``/proc/PID/environ``); only this user's
processes started since the run was created are read, and only when stopping or ending a run.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from gpumon.core.events import RUN_DIR_ENV


def marked(run_dir: Path, since: float | None = None, skip: frozenset[int] = frozenset()) -> dict[int, float]:
    """pid -> start time of this user's live processes whose environment names ``run_dir``."""
    me, wanted, out = os.getuid(), str(run_dir), {}
    for proc in psutil.process_iter(["uids", "create_time", "status"]):
        info = proc.info
        uids, started = info.get("uids"), info.get("create_time")
        if uids is None or uids.real != me or started is None or proc.pid in skip or proc.pid == os.getpid():
            continue
        if (since is not None and started < since - 1.0) or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get(RUN_DIR_ENV) == wanted:
                out[proc.pid] = started
        except psutil.Error:
            continue
    return out


def descendants(pid: object, started: object) -> dict[int, float]:
    """pid -> start time of every live descendant of the run's runner (``pid`` checked by its start time).

    The runner is a child subreaper (runner.py): a helper the command double-forked with an empty environment
    (no mark) is still among them after the supervisor died."""
    if not isinstance(pid, int) or not isinstance(started, int | float):
        return {}
    out: dict[int, float] = {}
    try:
        runner = psutil.Process(pid)
        if abs(runner.create_time() - started) >= 0.5:
            return {}  # the pid was reused
        for proc in runner.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    out[proc.pid] = proc.create_time()
    except psutil.Error:
        return out
    return out
