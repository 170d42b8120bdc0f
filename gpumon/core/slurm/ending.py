"""A Slurm run's end in Slurm's words: the job's end state and slurmstepd's messages in ``slurm-<job>.out``
("DUE TO TIME LIMIT", "Detected 1 oom_kill event", "exceeded memory limit", "NODE FAILURE", "PREEMPTION").

Written by the run's supervisor when it ends inside the job (``at_end``), or by a reader on the login node
when the job is over and no supervisor wrote its end (``record_job_end``: it was killed with the job).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from gpumon.core.runs.record.store import RunRecord, write_json
from gpumon.core.slurm import jobs

TAIL_BYTES = 64 * 1024
SIGNALLED_WAIT_S = 4.0
# Slurm's end states that say why the job was ended, with words for the run's error.
ENDED_BY = {
    "TIMEOUT": "Slurm ended the job at its time limit",
    "OUT_OF_MEMORY": "Slurm ended the job: it went past its memory limit",
    "NODE_FAIL": "Slurm ended the job: a node failed",
    "PREEMPTED": "Slurm ended the job: it was preempted",
    "BOOT_FAIL": "Slurm could not boot the job's nodes",
    "DEADLINE": "Slurm ended the job at its deadline",
    "CANCELLED": "the job was cancelled (scancel)",
}

OUTCOME = {"finished": "COMPLETED", "stopped": "CANCELLED", "killed": "CANCELLED"}  # the rest: FAILED


def stepd_lines(run_dir: Path, job_id: str) -> list[str]:
    """slurmstepd's and gpumon's own lines from the tails of the job's output file (the batch step's) and of
    the run's launcher log (srun's: the ranks' step)."""
    lines: list[str] = []
    for path in (run_dir / f"slurm-{job_id}.out", run_dir / "logs" / "launcher.log", run_dir / "logs" / "rank0.log"):
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if "slurmstepd" in line:  # from its name on: a tqdm frame without a newline may come before it
                lines.append(line[line.index("slurmstepd") :].strip())
            elif line.startswith("gpumon:"):
                lines.append(line.strip())
    return lines[-10:]


def classify(state: str | None, lines: list[str]) -> str | None:
    """The end's kind as Slurm's word (TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, CANCELLED) or None.
    The messages decide where the state is only FAILED (a memory limit without cgroups ends a step so)."""
    text = "\n".join(lines)
    if "DUE TO TIME LIMIT" in text:
        return "TIMEOUT"
    if "oom_kill event" in text or "exceeded memory limit" in text or "Exceeded job memory limit" in text:
        return "OUT_OF_MEMORY"
    if "DUE TO NODE FAIL" in text:
        return "NODE_FAIL"
    if "DUE TO PREEMPTION" in text:
        return "PREEMPTED"
    if state in ENDED_BY:
        return state
    if "CANCELLED AT" in text:
        return "CANCELLED"
    return None


def started() -> dict[str, Any]:
    """status.json's fields of a supervisor that starts inside its job."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return {}
    return {"slurm_state": "RUNNING", "slurm_reason": None, "slurm_nodes": os.environ.get("SLURM_JOB_NODELIST")}


def at_end(run_dir: Path, state: str, fields: dict[str, Any]) -> str:
    """In the supervisor, inside the job: add the job's end to ``fields`` (status.json's end); the run's state,
    which a time limit, memory limit, node failure or preemption turns to failed (a stop by Slurm, not the
    user's)."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return state
    # slurmstepd writes its message as it signals, and the controller may still read RUNNING: a run ended by a
    # signal (Slurm's or the user's) waits for one of them to say why, bounded (KillWait is 30 s by default).
    deadline = time.monotonic() + (SIGNALLED_WAIT_S if state in ("stopped", "killed") else 0.5)
    while True:
        time.sleep(0.5)
        job = jobs.from_scontrol(job_id)
        lines = stepd_lines(run_dir, job_id)
        kind = classify(job.state if job else None, lines)
        if kind or (job is not None and not job.active) or time.monotonic() >= deadline:
            break
    if job is not None and job.active:  # the job ends with this process: its state as the run ended
        job = jobs.Job(job.id, kind or OUTCOME.get(state, "FAILED"), None, job.nodes, job.start, job.limit)
    fields["slurm_state"] = (job.state if job else None) or kind
    fields["slurm_reason"] = job.waiting if job else None
    fields["slurm_time_limit"] = job.limit if job else None
    fields["slurm_nodes"] = os.environ.get("SLURM_JOB_NODELIST")
    if lines:
        fields["slurm_messages"] = lines
    if kind in ENDED_BY and kind != "CANCELLED":
        fields["slurm_end"] = kind
        fields["error"] = {"message": _message(kind, lines), "slurm": kind}
        return "failed"
    return state


def record_job_end(record: RunRecord) -> None:
    """On a reader: the job is over and no supervisor wrote its end. Slurm's end, in the run's status."""
    job_id = str(record.status.get("slurm_job_id"))
    job = jobs.ended(job_id) or jobs.job(job_id)
    lines = stepd_lines(record.dir, job_id)
    kind = classify(job.state if job else None, lines)
    status = {**record.status, "ended": time.time(), "exit_code": None}
    status.update(slurm_state=job.state if job else kind, slurm_reason=job.waiting if job else None)
    status["slurm_time_limit"] = job.limit if job else None
    if lines:
        status["slurm_messages"] = lines
    if record.status.get("state") == "pending" and not record.status.get("started"):
        told = next((line for line in lines if line.startswith("gpumon:")), None)
        why = told or _never_wrote(record, job)
        status.update(state="stopped" if kind == "CANCELLED" else "failed", ended_by=why)
        status["error"] = {"message": why}
    elif kind in ENDED_BY:
        status.update(state="stopped" if kind == "CANCELLED" else "failed", ended_by=_message(kind, lines))
        status["error"] = {"message": _message(kind, lines), "slurm": kind}
        status["slurm_end"] = kind
    else:
        status.update(state="lost", ended_by="its supervisor died with the job")
    with contextlib.suppress(OSError):
        write_json(record.dir / "status.json", status)


def _never_wrote(record: RunRecord, job: jobs.Job | None) -> str:
    """Why a job's run has no word from its supervisor: it never started (cancelled while it waited: no node
    was ever given to it), else the state dir is not shared with the nodes."""
    if job is not None and job.state == "CANCELLED" and not job.nodes:
        waited = f" ({job.reason})" if job.reason else ""  # the Reason Slurm keeps: the last thing it waited for
        return f"the job was cancelled while it waited in the queue{waited}: it never started"
    return (
        f"the job ended ({job.state if job else 'unknown'}) before its supervisor wrote anything into "
        f"{record.dir}: if it ran, the state dir is not on a filesystem the nodes share (set GPUMON_HOME)"
    )


def _message(kind: str, lines: list[str]) -> str:
    said = next((line for line in lines if "***" in line or "memory" in line or "oom" in line), None)
    return f"{ENDED_BY[kind]}" + (f": {said.split('error: ', 1)[-1]}" if said else "")
