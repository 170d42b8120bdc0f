"""The rows of ``gpumon runs --json``: one dict per run, for scripts and for the fleet's remote Runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpumon.core.placement.places import row_fields
from gpumon.core.runs.reading.ledger import goodput
from gpumon.core.runs.reading.progress import ROW_FIELDS
from gpumon.core.runs.reading.rank_rows import proc_count
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.reading.use import USE_FIELDS
from gpumon.core.runs.record.values import json_value

RUNS_SCHEMA = 1


def run_doc(summary: RunSummary) -> dict[str, Any]:
    """One run's row: its record, the latest step, loss (NaN and infinities as "nan"/"inf") and its source,
    the total steps and their source, throughput and memory, its alerts; a live run's pids."""
    doc = summary.record.to_dict()
    doc["nproc"] = proc_count(summary.record, summary.ranks)  # a script's own ranks (mp.spawn) count too
    doc["ranks"] = rank_docs(summary)  # rank, pid, step, host, started; score, own_s, wait_s (lanes.py)
    doc["lanes_unknown"] = summary.lanes_unknown  # why no rank has a score where ranks step (on a GPU)
    loss, rate = json_value(summary.loss), json_value(summary.samples_per_s)  # NaN/inf as "nan"/"inf"/"-inf"
    doc.update(step=summary.step, loss=loss, loss_source=summary.loss_source, samples_per_s=rate)
    doc.update(memory_bytes=summary.memory)
    doc.update(memory_kind=summary.memory_kind or None, rss_bytes=summary.rss)
    doc.update({key: getattr(summary, key) for key in ROW_FIELDS})  # progress.py
    doc["total_source"] = summary.total_source  # plan, hf, lightning, tqdm
    doc["alerts"] = list(summary.alerts)
    doc["data_wait_share"] = summary.data_wait  # 0..1: DataLoader wait per second of training (feeding.py)
    doc.update({key: summary.use.get(key) for key in USE_FIELDS})  # mfu, tokens_per_s, flops_per_step (use.py)
    doc["warnings"] = list(summary.warnings)  # "input-bound: 74% of each step waits for data (...)"
    doc["attempt"] = summary.attempt  # torchrun's attempt, from 1; each failed one in restarts (attempts.py)
    doc["restarts"] = list(summary.restarts)
    doc["reported"] = summary.reported  # the latest ray.train.report: {"source", "step", "metrics"} (rank 0's)
    doc["ledger"] = summary.ledger  # seconds of the wall time per part, and "wall" (core/runs/reading/ledger.py)
    doc["goodput"] = goodput(summary.ledger)  # steps over wall, 0..1
    # Its place's fields: slurm_job_id, slurm_state, slurm_reason on every row; a queued run's queue_position,
    # queue_reason (placement/places.py)
    doc.update(row_fields(summary.record))
    if summary.exception and summary.state == "failed":  # the uncaught exception, when no root-cause file said it
        raw = doc.get("error")
        error: dict[str, Any] = raw if isinstance(raw, dict) else {}
        doc["error"] = {**error, "message": error.get("message") or summary.exception}
    if summary.record.live:  # which GPU processes belong to the run (a remote host's RUN column)
        doc["pids"] = [pid for pid, _ in summary.record.processes()]
    return doc


def rank_docs(summary: RunSummary) -> list[dict[str, Any]]:
    """Each rank's row with its lane: ``score`` (1.0 as fast as the fastest), ``own_s`` and ``wait_s`` a step;
    None where not measured (one rank, or no backward or collective timed)."""
    lanes = {lane["rank"]: lane for lane in summary.lanes}
    return [{**row.to_dict(), **lane_fields(lanes.get(row.rank))} for row in summary.ranks]


def lane_fields(lane: dict[str, Any] | None) -> dict[str, Any]:
    return {key: (lane or {}).get(key) for key in ("score", "own_s", "wait_s")}


def recent(summaries: Sequence[RunSummary], ended: int | None) -> list[RunSummary]:
    """Every live or queued run and the newest ``ended`` ended ones (all with None), in the order given."""
    if ended is None:
        return list(summaries)
    ended_runs = [s for s in summaries if not s.record.live and s.state != "queued"]
    keep = {id(s) for s in newest_first(ended_runs)[:ended]}
    return [s for s in summaries if s.record.live or s.state == "queued" or id(s) in keep]


def newest_first(summaries: Sequence[RunSummary]) -> list[RunSummary]:
    """The order of ``gpumon runs`` and of the Runs view: by creation time, the newest on top."""
    return sorted(summaries, key=lambda s: (s.record.created, s.id), reverse=True)
