"""A run whose supervisor died is adopted by a new one (``supervisor --adopt RUN_DIR``): it takes the lock,
finds every process of the run (status.json's pids and every process carrying the run's mark), drains
their output again if the run's runner died too (runner.py: it drains the output while it lives), records the
end with the exit code the runner wrote, and obeys stop, as the first supervisor would have."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psutil

from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord, process_alive
from gpumon.core.runs.supervision.end_alerts import end_alert
from gpumon.core.runs.supervision.ending import compress, end_fields, index_run
from gpumon.core.runs.supervision.liveness import frozen
from gpumon.core.runs.supervision.output import Drain
from gpumon.core.runs.supervision.reserve import write_end
from gpumon.core.runs.supervision.runner import FINISH_S, read_exit

MARKS_EVERY_S = 5.0  # how often the adopter looks again for processes carrying the run's mark


def adopt(sup: Any) -> int:
    """``sup``: the adopting Supervisor (typed loosely: supervisor.py imports this module)."""
    if not sup._lock():
        return 0  # its supervisor lives, or another gpumon adopted it first
    sup._handle_signals()
    record = RunRecord(sup.run_dir.name, sup.run_dir, RunSpec.from_dict(sup.spec), sup.status)
    sup.known = {pid: t for pid, t in record.processes() if t is not None and process_alive(pid, t)}
    sup._find_marked()  # also what left the pids the dead supervisor knew (a double fork, a late helper)
    sup.fold.use_summary = True  # go on from the first supervisor's summary, not from the first event
    runner = (sup.status.get("runner_pid"), sup.status.get("runner_create_time"))
    drain = Drain(sup.run_dir / "logs")
    if not process_alive(*runner):  # the runner drains the output while it lives (two readers would interleave)
        torchrun = sup.command.get("env", {}).get("GPUMON_TORCHRUN")
        drain.reattach(sup.status.get("pid"), sup.status.get("output_fd"), "launcher.log" if torchrun else "rank0.log")
    me = psutil.Process()
    # A status.json found damaged was read as {}: with no state the run would list as "starting" while it runs.
    state = sup.status.get("state") if sup.status.get("state") in ("stalled", "stopping") else "running"
    sup.save(state=state, supervisor_pid=me.pid, supervisor_create_time=me.create_time(), adopted=time.time())
    sup.events.write("note", text="the run's supervisor was gone: gpumon adopted the run")
    looked = time.monotonic()
    while any(process_alive(pid, started) for pid, started in sup.known.items()):
        sup.summarise()
        if isinstance(runner[0], int) and process_alive(*runner) and frozen(runner[0]):
            os.kill(runner[0], signal.SIGCONT)  # a stopped runner drains nothing: the script's print() would wait
        if sup.stop_at is not None and time.monotonic() >= sup.stop_at:
            sup._signal_all(signal.SIGKILL)
            sup.outcome, sup.stop_at = "killed", None
        if time.monotonic() - looked >= MARKS_EVERY_S:
            sup._find_marked()
            looked = time.monotonic()
        time.sleep(0.5)
    deadline = time.monotonic() + FINISH_S
    while process_alive(*runner) and time.monotonic() < deadline:  # it writes exit.json, then ends the logs
        time.sleep(0.1)
    drain.close()
    sup.fold.update()
    found = read_exit(sup.run_dir, sup.status.get("pid"))  # the runner outlived the first supervisor
    rc: int | None = found["exit_code"] if found else None
    fields = end_fields(sup.run_dir, rc, sup.outcome, sup.fold.exceptions)
    # What a full disk made us drop: the runner's count (in exit.json) and, with the runner dead, our own.
    dropped = {str(k): list(v) for k, v in ((found or {}).get("dropped_by") or {}).items() if _counts(v)}
    dropped.update(drain.dropped_by_log())
    if dropped:
        sup.dropped = dropped
        fields["output_dropped"] = {name: n[0] for name, n in dropped.items()}
        sup.events.write("note", text=f"{sum(n[0] for n in dropped.values())} bytes of the run's output were lost")
    state, error = fields["state"], fields.get("error")
    sup.events.write("run_end", state=state, exit_code=rc, adopted=True)
    ending = end_alert(sup.run_dir, sup.spec, {**sup.status, **fields}, sup.fold, rc, error)
    if ending is not None:
        sup.alert(ending[0], ending[1], state=state, **ending[2])
    sup.summarise(final=True)
    sup.status.update(fields)
    sup.ending = True  # SIGTERM now ends a wait for space, not a run
    write_end(sup)  # as the supervisor ends a run: in the end reserve on a full disk
    index_run(sup.run_dir, sup.status, sup.fold, sup.watch, sup.events)
    compress(sup)
    return 0


def _counts(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(n, int) for n in value)
