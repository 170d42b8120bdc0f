"""Runs that train, but slowly: waiting for their data, or fighting over the CPUs. The findings and their fixes,
filled with the run's own values (its DataLoader's settings, its threads, this machine's CPUs).

The measurements and thresholds are in core/runs/feeding.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.runs.feeding import suggested_workers


@dataclass(frozen=True)
class Slowness:
    kind: str  # "input_bound" or "oversubscribed"
    rank: int | None
    text: str  # "input-bound: 74% of each step waits for data (DataLoader num_workers=0, batch 16)"


def _loader_words(loader: dict[str, Any]) -> str:
    parts = []
    if "num_workers" in loader:
        parts.append(f"num_workers={loader['num_workers']}")
    if "batch_size" in loader:
        parts.append(f"batch {loader['batch_size']}")
    return f" (DataLoader {', '.join(parts)})" if parts else ""


def slow_findings(telemetry: Any) -> list[Slowness]:
    """What makes the run slow, worst first; empty for a run that keeps its CPUs and GPUs fed."""
    out: list[Slowness] = []
    found = telemetry.feeding.input_bound()
    if found is not None:
        rank, share, loader = found
        feed = telemetry.feeding.ranks.get(rank)
        gpu = feed.gpu if feed is not None else None
        busy = f"; its GPU {gpu[0]} is {gpu[1]:.0f}% busy" if gpu is not None else ""
        out.append(
            Slowness(
                "input_bound",
                rank,
                f"input-bound: {share:.0%} of each step waits for data{_loader_words(loader)}{busy}",
            )
        )
    crowded = telemetry.feeding.oversubscribed()
    if crowded is not None:
        host, ranks, threads, cpus, workers = crowded
        extra = f" (+ {workers} DataLoader workers)" if workers else ""
        out.append(
            Slowness(
                "oversubscribed",
                None,
                f"CPU oversubscribed: {ranks} rank{'s' if ranks != 1 else ''} run {threads} torch threads{extra} "
                f"on {cpus} CPUs" + (f" of {host}" if host else ""),
            )
        )
    return out


def slow_advice(finding: Slowness, telemetry: Any, ranks: int) -> list[Advice]:
    """The fixes for ``finding``, best first."""
    if finding.kind == "oversubscribed":
        return _thread_advice(telemetry, ranks)
    feed = telemetry.feeding.ranks.get(finding.rank)
    loader: dict[str, Any] = (feed.loader if feed is not None else None) or {}
    share = feed.share() if feed is not None else None
    threads = (feed.threads if feed is not None else None) or {}
    cpus = int(threads.get("cpus") or os.cpu_count() or 1)
    memory = telemetry.memory.get(finding.rank)
    cuda = memory is not None and memory.device.startswith("cuda")
    workers = int(loader.get("num_workers") or 0)
    want = suggested_workers(ranks, cpus)
    waits = f"rank {finding.rank} waits for data {share:.0%} of each step" if share is not None else "it waits"
    scored: list[tuple[int, Advice]] = []
    if workers < want:
        scored.append(
            (
                90,
                Advice(
                    "num_workers",
                    f"load batches in {want} worker process{'es' if want != 1 else ''} (num_workers={workers} now)",
                    f"{waits}; with num_workers={workers} the {'main process' if not workers else 'workers'} "
                    f"prepare{'s' if not workers else ''} every batch while training waits; this machine has "
                    f"{cpus} CPUs for {ranks} rank{'s' if ranks != 1 else ''}",
                    f"DataLoader(..., num_workers={want}, persistent_workers=True)",
                ),
            )
        )
    where = loader.get("getitem")
    name = loader.get("dataset") or "the dataset"
    scored.append(
        (
            80 if workers >= want else 60,
            Advice(
                "decode",
                "do the decoding once, not in every __getitem__",
                f"{name}.__getitem__" + (f" at {where}" if where else "") + " runs for every sample, every epoch",
                "decode/resize once ahead of training (save tensors or a preprocessed file, e.g. numpy memmap), "
                "cache decoded samples, or move heavy transforms into the batch on the GPU",
            ),
        )
    )
    if cuda and not loader.get("pin_memory"):
        scored.append(
            (
                55,
                Advice(
                    "pin_memory",
                    "pin the batches' memory",
                    "the rank trains on CUDA with pin_memory off: each copy to the GPU goes through pageable memory",
                    "DataLoader(..., pin_memory=True) and .to(device, non_blocking=True)",
                ),
            )
        )
    if workers and not loader.get("persistent_workers"):
        scored.append(
            (
                45,
                Advice(
                    "persistent_workers",
                    "keep the workers between epochs",
                    f"{workers} workers start again at every epoch (persistent_workers=False)",
                    "DataLoader(..., persistent_workers=True)",
                ),
            )
        )
    if workers:
        factor = int(loader.get("prefetch_factor") or 2)
        scored.append(
            (
                40,
                Advice(
                    "prefetch_factor",
                    "let each worker prepare more batches ahead",
                    f"prefetch_factor={factor}: each worker holds {factor} batches ready",
                    f"DataLoader(..., prefetch_factor={factor * 2}) (more memory per worker)",
                ),
            )
        )
    return [advice for _, advice in sorted(scored, key=lambda pair: -pair[0])]


def _thread_advice(telemetry: Any, ranks: int) -> list[Advice]:
    crowded = telemetry.feeding.oversubscribed()
    if crowded is None:
        return []
    _, local, threads, cpus, workers = crowded
    each = max(1, cpus // max(1, local))
    return [
        Advice(
            "threads",
            f"give each rank {each} thread{'s' if each != 1 else ''}",
            f"{local} ranks x {threads // max(1, local)} intra-op threads = {threads} threads on {cpus} CPUs"
            + (f", beside {workers} DataLoader workers" if workers else "")
            + ": they take turns on the cores, and every collective waits for the slowest",
            f"OMP_NUM_THREADS={each} in the ranks' environment (gpumon launch --env OMP_NUM_THREADS={each}), "
            f"or torch.set_num_threads({each}) at the top of each rank; torchrun sets 1 by default",
        )
    ]
