"""A job Slurm ended at its time limit: the ``--time`` it needs, from the run's pace and its total steps (a
plan, a framework's or tqdm's total) when both are known, else what the run reached in the time it had.

The projection: the time the run took, plus the steps left at its pace (the SPEED column's: the median of
its latest step times), +20% for start-up and noise, rounded up to a minute in Slurm's format."""

from __future__ import annotations

import math

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.runs.reading.progress import rate_text
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.store import RunRecord
from gpumon.core.slurm.times import seconds, slurm_time

MARGIN = 1.2
_SOURCES = {
    "plan": "its plan",
    "hf": "the HF Trainer's max_steps",
    "lightning": "Lightning's estimated stepping batches",
    "tqdm": "its tqdm bar's total",
}


def time_limit(record: RunRecord) -> int | None:
    """The job's time limit in seconds: what Slurm said at its end, else the --time asked; None if unknown."""
    for said in (record.status.get("slurm_time_limit"), (record.spec.slurm or {}).get("time")):
        found = seconds(said) if said else None
        if found is not None:
            return found
    return None


def limit_text(record: RunRecord) -> str:
    limit = time_limit(record)
    return slurm_time(limit) if limit is not None else "the partition's default"


def time_advice(record: RunRecord, telemetry: RunTelemetry, where: str, max_time: str | None) -> Advice:
    progress = telemetry.progress
    total, source = progress.total
    done, per_step, took = progress.position(), progress.step_time_s, record.elapsed()
    ran = f" in {slurm_time(took)}" if took is not None else ""
    pace = f" at {rate_text(per_step)}" if per_step else ""
    if total and done and took is not None:
        # what is left in the total's own unit at its own rate (progress.py); else the run's own average
        left = progress.fields(False)["eta_s"]
        left = left if left is not None else max(0, total - done) * took / done
        asked = math.ceil((took + left) * MARGIN / 60) * 60
        ask = slurm_time(asked)
        why = f"reached step {done:,} of {total:,} ({_SOURCES.get(str(source), source)}){ran}{pace}"
        why += f": the {max(0, total - done):,} steps left need ~{slurm_time(left)} more; +20%"
        change = f"--time {ask} ({where})"
        most = seconds(max_time) if max_time else None
        if most is not None and asked > most:
            change += "; more than the partition allows: --sbatch-arg=--requeue and resume from a checkpoint"
        return Advice("time", f"ask for --time {ask}", why, change)
    steps = progress.job_step() or progress.step  # no total: its own optimizer steps say how far it got
    reached = f"reached step {steps:,}{ran}{pace}" if steps else f"reported no training step{ran}"
    why = f"{reached}; no total steps known (a plan, a framework's max steps, a tqdm total) to project from"
    limit = time_limit(record)
    longer = f"more than {slurm_time(limit)}" if limit is not None else "more than the partition's default"
    return Advice("time", f"ask for a --time {longer}", why, f"--time {longer} ({where})")
