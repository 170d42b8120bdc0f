"""A run that Slurm ended (time limit, memory limit, node failure, preemption): the failure in Slurm's words and
the sbatch options that fix it, filled with what the run showed (its step time and plan, its peak memory) and
the partition's limits (``scontrol show partition``)."""

from __future__ import annotations

import math

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.doctor.failures import Failure
from gpumon.core.doctor.slurm_time import limit_text, time_advice
from gpumon.core.format import size
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.store import RunRecord
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
    title = TITLES.get(end, f"Slurm ended the job ({end})").format(limit=limit_text(record))
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
        out.append(time_advice(record, telemetry, where, limits.get("MaxTime")))
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


def gpus_advice(record: RunRecord) -> list[Advice]:
    """A job that found no GPU: ask Slurm for them (the node has none unless the job asks)."""
    asked = int((record.spec.slurm or {}).get("gpus_per_node") or 0)
    if asked:
        return []
    want = max(1, record.spec.nproc)
    why = "the job asked Slurm for no GPU (no --gpus-per-node), so its ranks see none"
    change = f"gpumon launch ... --slurm --gpus-per-node {want} (and a GPU partition: --partition)"
    return [Advice("gpus_per_node", f"ask the job for {want} GPU(s) per node", why, change)]
