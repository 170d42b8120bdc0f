"""What a run's row says of its job: ``slurm_job_id``, ``slurm_state`` (Slurm's own word) and ``slurm_reason``,
with the nodes and, while pending, squeue's start estimate. A live run asks Slurm (one cached squeue for all);
an ended one reads what its supervisor, or the reader that saw the job end, recorded."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from gpumon.core.runs.record.store import RunRecord
from gpumon.core.slurm import jobs

SILENT_S = 60.0  # a job running this long while the run's directory shows nothing: not a shared filesystem


def slurm_fields(record: RunRecord) -> dict[str, Any]:
    status = record.status
    job_id = status.get("slurm_job_id")
    if not job_id:
        return {"slurm_job_id": None, "slurm_state": None, "slurm_reason": None}
    recorded = status.get("slurm_state")
    out: dict[str, Any] = {
        "slurm_job_id": str(job_id),
        "slurm_state": recorded,
        # an ended job waits for nothing (an older gpumon recorded the Reason Slurm keeps: "Resources")
        "slurm_reason": status.get("slurm_reason") if recorded in (None, *jobs.ACTIVE) else None,
        "slurm_nodes": status.get("slurm_nodes"),
        "slurm_start": None,
    }
    if record.live:
        job = jobs.job(str(job_id))
        if job is not None:
            out.update(slurm_state=job.state, slurm_reason=job.waiting, slurm_nodes=job.nodes or out["slurm_nodes"])
            plausible = -_since(job.start) < 300 * 86400  # Slurm says "a year from now" when it cannot tell
            out["slurm_start"] = job.start if job.state == "PENDING" and plausible else None
            if status.get("state") == "pending" and job.state == "RUNNING" and _since(job.start) > SILENT_S:
                out["slurm_reason"] = unshared(record, job.nodes)
    return out


def unshared(record: RunRecord, nodes: str | None) -> str:
    return (
        f"the job runs on {nodes or 'its node'} but its supervisor has written nothing into {record.dir}: "
        "the state dir must be on a filesystem the nodes share (set GPUMON_HOME to one)"
    )


def status_text(record: RunRecord, fields: dict[str, Any]) -> str:
    """The STATUS cell of ``gpumon runs``: the run's state, and the job's while it waits."""
    job = fields.get("slurm_job_id")
    if not job:
        return record.state
    if record.state == "pending":
        why = fields.get("slurm_reason") or "queued"
        start = f", start ~{fields['slurm_start']}" if fields.get("slurm_start") else ""
        return f"pending (job {job}: {why}{start})"
    state = fields.get("slurm_state")
    extra = f" {state}" if state and state not in ("RUNNING", "COMPLETED", "PENDING") else ""
    return f"{record.state} (job {job}{extra})"


def _since(start: str | None) -> float:
    if not start:
        return 0.0
    try:
        return time.time() - datetime.fromisoformat(start).timestamp()
    except ValueError:
        return 0.0


def slurm_line(record: RunRecord) -> str:
    """The job in one line for the run's detail: "job 5 · PENDING (Resources) · start ~…" ("" for no job)."""
    fields = slurm_fields(record)
    if not fields["slurm_job_id"]:
        return ""
    parts = [f"Slurm job {fields['slurm_job_id']}"]
    if fields.get("slurm_state"):
        parts.append(
            str(fields["slurm_state"]) + (f" ({fields['slurm_reason']})" if fields.get("slurm_reason") else "")
        )
    if fields.get("slurm_nodes"):
        parts.append(f"on {fields['slurm_nodes']}")
    if fields.get("slurm_start"):
        parts.append(f"start ~{fields['slurm_start']}")
    return " · ".join(parts)
