"""A run that Slurm ended (time limit, memory limit, node failure, preemption): the failure in Slurm's words and
the sbatch options that fix it, filled with what the run showed (its step time and plan, its peak memory) and
the partition's limits (``scontrol show partition``)."""

from __future__ import annotations

import math
from statistics import median

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.doctor.failures import Failure
from gpumon.core.format import size
from gpumon.core.runs.store import RunRecord
from gpumon.core.runs.telemetry import RunTelemetry
from gpumon.core.slurm.commands import run

TITLES = {
    "TIMEOUT": "Slurm ended the job at its time limit ({limit})",
    "OUT_OF_MEMORY": "Slurm ended the job: it went past its memory limit",
    "NODE_FAIL": "Slurm ended the job: a node failed",
    "PREEMPTED": "Slurm ended the job: it was preempted by a job of higher priority",
    "BOOT_FAIL": "Slurm could not boot the job's nodes",
    "DEADLINE": "Slurm ended the job at its deadline",
}
REQUEUE = "--sbatch-arg=--requeue, and start the script from its last checkpoint (e.g. -- --resume last.ckpt)"


def slurm_failure(record: RunRecord) -> Failure:
    status = record.status
    end = str(status.get("slurm_end"))
    limit = (record.spec.slurm or {}).get("time") or "the partition's default"
    title = TITLES.get(end, f"Slurm ended the job ({end})").format(limit=limit)
    lines = tuple(str(line) for line in status.get("slurm_messages") or ())
    return Failure(f"slurm_{end.lower()}", title, "\n".join(lines), lines, f"job {status.get('slurm_job_id')}")


def slurm_advice(record: RunRecord, telemetry: RunTelemetry) -> list[Advice]:
    end = str(record.status.get("slurm_end"))
    options = record.spec.slurm or {}
    partition = options.get("partition") or _default_partition()
    limits = partition_limits(partition) if partition else {}
    where = f"partition {partition}: MaxTime={limits.get('MaxTime', '?')}" if partition else "the default partition"
    out: list[Advice] = []
    if end == "TIMEOUT":
        need = _time_needed(record, telemetry)
        if need is not None:
            out.append(
                Advice("time", f"ask for --time {need}", _time_why(record, telemetry), f"--time {need} ({where})")
            )
        else:
            out.append(
                Advice("time", "ask for a longer --time", "the run had no step plan to project", f"--time ({where})")
            )
        out.append(Advice("requeue", "resume instead of starting over", "the job ran out of time", REQUEUE))
    elif end == "OUT_OF_MEMORY":
        peak = telemetry.rss()
        ranks = max(1, record.spec.nproc)
        if peak:
            want = math.ceil(peak * ranks * 1.5 / 2**30)
            why = f"peak resident memory {size(peak)} per rank x {ranks} rank(s) on a node, +50%"
            gpus = int(options.get("gpus_per_node") or 0)
            change = f"--sbatch-arg=--mem={want}G" + (
                f" (or --sbatch-arg=--mem-per-gpu={math.ceil(want / gpus)}G)" if gpus else ""
            )
            out.append(Advice("mem", f"ask for --mem={want}G", why, change))
        else:
            out.append(Advice("mem", "ask for more memory", "Slurm's limit was reached", "--sbatch-arg=--mem=..."))
        out.append(Advice("mem_limits", "the partition's memory limits", where, _memory_limits(limits)))
    elif end in ("NODE_FAIL", "PREEMPTED"):
        nodes = record.status.get("slurm_nodes") or "the failed node"
        out.append(Advice("requeue", "let Slurm requeue the job and resume", f"the job ended by {end}", REQUEUE))
        if end == "NODE_FAIL":
            out.append(Advice("exclude", "keep off the failed node", str(nodes), f"--sbatch-arg=--exclude={nodes}"))
        else:
            mode = limits.get("PreemptMode", "?")
            out.append(
                Advice(
                    "partition", "a partition that is not preempted", f"PreemptMode={mode}", f"--partition ({where})"
                )
            )
    return out


def partition_limits(partition: str) -> dict[str, str]:
    answer = run(["scontrol", "show", "partition", "-o", partition])
    if not answer.ok:
        return {}
    return dict(word.split("=", 1) for word in answer.out.split() if "=" in word)


def _default_partition() -> str | None:
    answer = run(["sinfo", "--noheader", "--format=%P"])
    names = [p for p in answer.out.split() if p.endswith("*")] if answer.ok else []
    return names[0].rstrip("*") if names else None


def _memory_limits(limits: dict[str, str]) -> str:
    keys = ("DefMemPerCPU", "MaxMemPerCPU", "DefMemPerNode", "MaxMemPerNode", "DefMemPerGPU")
    found = [f"{k}={limits[k]}" for k in keys if k in limits]
    return ", ".join(found) or "unknown (scontrol show partition)"


def _step_s(telemetry: RunTelemetry) -> float | None:
    dts = [median(d) for d in telemetry.progress.dts.values() if d]
    return max(dts) if dts else None


def _time_needed(record: RunRecord, telemetry: RunTelemetry) -> str | None:
    progress, step_s, elapsed = telemetry.progress, _step_s(telemetry), record.elapsed()
    plan = max(progress.plan.values(), default=None)
    done = max(progress.steps.values(), default=None)
    if step_s is None or plan is None or done is None or elapsed is None:
        return None
    seconds = (elapsed + max(0, int(plan) - int(done)) * step_s) * 1.25  # a quarter more for start-up and noise
    minutes = max(1, math.ceil(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{hours:02d}:{mins:02d}:00"


def _time_why(record: RunRecord, telemetry: RunTelemetry) -> str:
    progress = telemetry.progress
    done, plan = max(progress.steps.values(), default=0), max(progress.plan.values(), default=0)
    return f"step {done} of {plan} at {_step_s(telemetry) or 0:.2f} s/step after {record.elapsed() or 0:.0f} s; +25%"


def gpus_advice(record: RunRecord) -> list[Advice]:
    """A job that found no GPU: ask Slurm for them (the node has none unless the job asks)."""
    asked = int((record.spec.slurm or {}).get("gpus_per_node") or 0)
    if asked:
        return []
    want = max(1, record.spec.nproc)
    why = "the job asked Slurm for no GPU (no --gpus-per-node), so its ranks see none"
    change = f"gpumon launch ... --slurm --gpus-per-node {want} (and a GPU partition: --partition)"
    return [Advice("gpus_per_node", f"ask the job for {want} GPU(s) per node", why, change)]
