"""What a supervisor does once its run ended: name the root cause, index the run, retry an OOM at half the batch."""

from __future__ import annotations

import contextlib
import re
import signal
import time
from pathlib import Path
from typing import Any

from gpumon.core.doctor.leak import LeakWatch
from gpumon.core.events import EventWriter, compress_closed
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord, RunStore, read_json

_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)", re.S)


def root_cause(run_dir: Path) -> dict[str, Any] | None:
    """The failing rank and message from torchrun's error file and its console report, if any."""
    data = read_json(run_dir / "error.json")
    message: Any = data.get("message")
    error: dict[str, Any] = {}
    if isinstance(message, dict):
        error["message"] = str(message.get("message", ""))
        extra = message.get("extraInfo") or {}
        if isinstance(extra, dict) and extra.get("py_callstack"):
            error["traceback"] = str(extra["py_callstack"])[-8000:]
        if "errorCode" in message:
            error["exit_code"] = message["errorCode"]
    elif isinstance(message, str):
        error["message"] = message
    try:
        console = (run_dir / "logs" / "launcher.log").read_text(errors="replace")[-20000:]
    except OSError:
        console = ""
    found = _ROOT_CAUSE.search(console)
    if found:
        error["rank"] = int(found.group(1))
    return error or None


def end_fields(run_dir: Path, rc: int | None, outcome: str | None, exceptions: object) -> dict[str, Any]:
    """The end as status.json records it: state, exit code (None: nobody could wait for the command, its
    runner died with the supervisor), the signal that ended it, torchrun's root cause."""
    error = root_cause(run_dir) if rc != 0 else None
    if rc is None:
        state = outcome or ("failed" if exceptions or error else "exited")
    else:
        state = outcome or ("finished" if rc == 0 else "failed")
    fields: dict[str, Any] = {"state": state, "exit_code": rc, "ended": time.time()}
    if rc is not None and rc < 0:
        with contextlib.suppress(ValueError):
            fields["signal"] = signal.Signals(-rc).name
    if error:
        fields["error"] = error
    return fields


def compress(sup: Any) -> None:
    """The summary is final: the ranks' raw events are kept for whoever wants them, gzipped (~8x). ``sup``: the
    Supervisor (typed loosely: supervisor.py imports this module)."""
    if sup.summary_error is not None:
        return  # no final summary on disk: keep the events as readers expect them
    try:
        raw, stored = compress_closed(sup.run_dir)
    except OSError as err:
        sup.events.write("note", text=f"could not compress the run's events: {err}")
        return
    if raw:
        with contextlib.suppress(OSError):
            sup.save(event_bytes={"raw": raw, "stored": stored})


DELETED = "its directory was deleted while it ran: its logs and events are gone"


def index_run(
    run_dir: Path,
    status: dict[str, Any],
    fold: RunTelemetry,
    watch: LeakWatch,
    events: EventWriter,
    spec_doc: dict[str, Any] | None = None,
) -> None:
    """The ended run's row in the state dir's index: listing it never reads its files again. ``spec_doc``: the
    spec as the supervisor read it at the start (a run whose directory was deleted has no spec.json left)."""
    from gpumon.core.runs.reading.summary import summarise, to_row
    from gpumon.core.runs.record.index import RunIndex

    try:
        spec = RunSpec.from_dict(spec_doc if spec_doc is not None else read_json(run_dir / "spec.json"))
        record = RunRecord(run_dir.name, run_dir, spec, dict(status))
        row = to_row(summarise(record, fold, watch.states()))
        index = RunIndex(run_dir.parent.parent)
        index.put([(record.id, record.created, row)])
        index.close()
    except Exception as err:  # noqa: BLE001 - the index is a cache: a reader rebuilds the row from the files
        events.write("note", text=f"could not index the run: {err}")


def retry_after_oom(run_dir: Path, status: dict[str, Any], fold: RunTelemetry, events: EventWriter) -> None:
    """--oom-retry: an out-of-memory failure starts this run again with half the batch size."""
    from dataclasses import replace

    from gpumon.core.doctor.evidence import run_failure
    from gpumon.core.gpu import visible_gpu_count
    from gpumon.core.placement.places import launch
    from gpumon.core.runs.supervision.retry import OOM_KINDS, halved

    store = RunStore(run_dir.parent.parent)
    spec = RunSpec.from_dict(read_json(run_dir / "spec.json"))
    record = RunRecord(run_dir.name, run_dir, spec, status)  # the end as it is about to be written
    fold.update()
    failure = run_failure(record, fold)
    if failure is None or failure.kind not in OOM_KINDS:
        return
    plan = halved(record.spec)
    if plan is None:
        events.write("note", text=f"{failure.title} at batch size 1: no smaller batch to retry with")
        return
    spec, old, new = plan
    try:
        retry = launch(replace(spec, retry_of=record.id), store, visible_gpu_count(), wait_s=0)
    except (OSError, ValueError) as err:
        events.write("note", text=f"out of memory at batch size {old}; the retry did not start: {err}")
        return
    status["retried_as"] = retry.id
    events.write("note", text=f"out of memory at batch size {old}: retrying as {retry.id} with {new}")
