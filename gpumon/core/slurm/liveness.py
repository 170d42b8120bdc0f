"""A Slurm run's state when no supervisor of it runs on this machine: the job's, from Slurm."""

from __future__ import annotations

from gpumon.core.slurm import jobs


def job_state(recorded: str, job_id: str) -> str:
    """``recorded``: status.json's live state. While the job is active its supervisor runs (or will) on a node:
    pending, or what the supervisor wrote; a job that is over with no end written is "lost" (the reader then
    writes Slurm's end: ending.record_job_end). Slurm unreachable: the recorded state, never "lost"."""
    job = jobs.job(job_id)
    if job is None:
        return recorded
    if job.active:
        if job.state == "PENDING":
            return "pending"
        return "starting" if recorded == "pending" else recorded
    return "lost"
