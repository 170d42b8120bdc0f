"""Runs gpumon did not start: a Tune driver in the user's own shell becomes a gpumon run, supervised.

``GpumonCallback`` built in a driver that no gpumon run owns (``RAY_TUNE_CALLBACKS`` exported
once, or the callback added by hand) calls ``register_external``: a run directory like any other
(spec, status naming the driver's pid) and a supervisor adopted onto it, which records the end
when the driver exits, summarises, and obeys ``gpumon stop``. Its output stays in the user's
terminal; the run's log says so.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord, RunStore, write_json, write_text

EXTERNAL_ENV = "GPUMON_TUNE_EXTERNAL"  # "0": a driver outside gpumon writes nothing


def register_external(kind: str = "tune", argv: list[str] | None = None) -> Path | None:
    """This process as a gpumon run (kind ``tune``); its run directory, or None if turned off or unwritable."""
    if os.environ.get(EXTERNAL_ENV, "1") == "0":
        return None
    from gpumon.core.runs.supervision.launcher import adopt

    argv = list(argv if argv is not None else [sys.executable, *sys.argv])
    script = next((a for a in argv[1:] if not a.startswith("-")), argv[0])
    spec = RunSpec(kind=kind, program=script, args=tuple(argv[argv.index(script) + 1 :]) if script in argv else (),
                   name=f"{Path(script).name} (outside gpumon)")  # fmt: skip
    try:
        store = RunStore()
        run_id, run_dir = store.new_run_dir(spec)
        me = psutil.Process()
        write_json(run_dir / "spec.json", spec.to_dict())
        (run_dir / "logs").mkdir(mode=0o700)
        write_text(
            run_dir / "logs" / "rank0.log",
            f"{' '.join(argv)}\nstarted outside gpumon (pid {me.pid}): its output is in the terminal that started it\n",
        )
        status = {"state": "running", "pid": me.pid, "pid_create_time": me.create_time(), "procs": [],
                  "started": time.time(), "external": True}  # fmt: skip
        write_json(run_dir / "status.json", status)
        adopt(RunRecord(run_id, run_dir, spec, status))
    except (OSError, psutil.Error):
        return None  # telemetry never fails the user's search
    return run_dir
