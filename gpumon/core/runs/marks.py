"""Every process of a run carries its mark: ``GPUMON_RUN_DIR`` in its environment (the launcher sets it; every
child inherits it, whatever session or process group it moves to). ``marked`` finds them without the
supervisor's memory: a helper that double-forked into its own session, or one started before the first scan.

Reading another process's environment is allowed for the same user (``/proc/PID/environ``); only this user's
processes started since the run was created are read, and only when stopping or ending a run.
"""

from __future__ import annotations

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
