"""The jobs of this user as Slurm sees them: one ``squeue --me`` for every run of a listing (cached for a few
seconds, whatever the number of runs), ``sacct`` (else ``scontrol``) for a job squeue no longer knows, and
``scancel``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from gpumon.core.slurm.commands import run

CACHE_S = 3.0
# Slurm's states of a job that is not over (squeue %T words).
ACTIVE = frozenset(
    {
        *("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD"),
        *("REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"),
    }
)
_FORMAT = "%i|%T|%r|%N|%S|%l"


@dataclass(frozen=True)
class Job:
    id: str
    state: str  # Slurm's own word: PENDING, RUNNING, COMPLETED, TIMEOUT, OUT_OF_MEMORY, ...
    reason: str | None = None  # Slurm's Reason: why it waits (Resources, Priority, ...); it outlives the wait
    nodes: str | None = None  # the node list while it runs; None for a job that never got one
    start: str | None = None  # squeue's start (an estimate while pending), ISO-like; None if unknown
    limit: str | None = None  # its time limit as Slurm writes it ("00:01:00", "1-00:00:00"); None if none

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def waiting(self) -> str | None:
        """Why the job waits, while it is not over: Slurm keeps the last Reason of a job cancelled while
        pending ("Resources"), which no longer says anything about it."""
        return self.reason if self.active else None


_lock = threading.Lock()
_cache: tuple[float, dict[str, Job] | None] = (0.0, None)
_refreshing = False


def parse_squeue(text: str) -> dict[str, Job]:
    jobs = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6 or not parts[0]:
            continue
        job, state, reason, nodes, start, limit = (p.strip() for p in parts)
        jobs[job] = Job(
            job,
            state.split()[0] if state else "UNKNOWN",
            None if reason in ("None", "", "(null)") else reason,
            nodes or None,
            None if start in ("N/A", "Unknown", "") else start,
            _none(limit),
        )
    return jobs


def mine(max_age: float = CACHE_S) -> dict[str, Job] | None:
    """This user's jobs that the controller still knows; None when Slurm could not be asked. Only the first
    question waits for squeue: after it, a stale answer is returned at once while a thread asks again (a
    view that reads a run's state never waits on the controller)."""
    global _refreshing
    at, jobs = _cache
    if jobs is not None and time.monotonic() - at < max_age:
        return jobs
    if jobs is not None:
        with _lock:
            if not _refreshing:
                _refreshing = True
                threading.Thread(target=_ask, name="squeue", daemon=True).start()
        return jobs
    with _lock:
        return _ask()


def _ask() -> dict[str, Job] | None:
    global _cache, _refreshing
    answer = run(["squeue", "--me", "--states=all", "--noheader", f"--format={_FORMAT}"])
    jobs = parse_squeue(answer.out) if answer.ok else None
    _cache, _refreshing = (time.monotonic(), jobs), False
    return jobs


def forget() -> None:
    """After a submit or a cancel: the next question waits for Slurm's answer."""
    global _cache
    _cache = (0.0, None)


def job(job_id: str) -> Job | None:
    """A job squeue knows, else its end from sacct or scontrol; None when no one can say."""
    known = mine()
    if known is None:
        return None  # the controller does not answer: sacct and scontrol would wait on it too
    if job_id in known:
        return known[job_id]
    return ended(job_id)


def ended(job_id: str) -> Job | None:
    answer = run(["sacct", "-X", "-n", "-P", "-j", job_id, "--format=JobID,State,Reason,NodeList,Start,Timelimit"])
    if answer.ok:
        for line in answer.out.splitlines():
            parts = line.split("|")
            if len(parts) >= 6 and parts[0] == job_id:
                state, reason, nodes, start, limit = parts[1].split()[0], *map(_none, parts[2:6])
                return Job(job_id, state, reason, nodes, start, limit)
    return from_scontrol(job_id)


def from_scontrol(job_id: str) -> Job | None:
    answer = run(["scontrol", "show", "job", "-o", job_id])
    if not answer.ok:
        return None
    fields = dict(word.split("=", 1) for word in answer.out.split() if "=" in word)
    state = fields.get("JobState")
    if not state:
        return None
    reason, nodes, start = (_none(fields.get(key)) for key in ("Reason", "NodeList", "StartTime"))
    return Job(job_id, state, reason, nodes, start, _none(fields.get("TimeLimit")))


def cancel(job_id: str) -> str | None:
    """scancel; why it failed, or None."""
    answer = run(["scancel", job_id])
    forget()
    return None if answer.ok else answer.why


def _none(text: str | None) -> str | None:
    return None if text in (None, "", "None", "(null)", "Unknown", "N/A", "None assigned") else text
