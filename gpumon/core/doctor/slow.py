"""Runs that train, but slowly: waiting for their data, or fighting over the CPUs. The findings and their fixes,
filled with the run's own values (its DataLoader's settings, its threads, this machine's CPUs).

The measurements and thresholds are in core/runs/reading/feeding.py. A wait spent mostly at epochs' edges (a loader
whose workers start again each epoch: ``persistent_workers=False``, the default) is said as such, with what it
costs (its share of the time, the seconds each start waits, the run's pace with and without them) and its
fixes first: keep the workers, and where they start by spawn, what each start re-imports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.doctor.gpu_slow import gpu_advice, gpu_findings
from gpumon.core.runs.reading.feeding import suggested_workers
from gpumon.core.runs.reading.progress import rate_text

# At least this share of the time waited at epochs' edges is a finding of its own, input-bound or not: a
# healthy loader's edges cost a few percent (persistent workers: one batch; fork: milliseconds).
EPOCH_EDGE = 0.2
GPU_KINDS = ("sync", "host_bound", "tf32_off", "small_batch", "pageable_copy", "default_stream_copy")


@dataclass(frozen=True)
class Slowness:
    kind: str  # "input_bound", "epoch_start", "oversubscribed"; on a GPU (gpu_slow.py): GPU_KINDS
    rank: int | None
    text: str  # "input-bound: 74% of each step waits for data (DataLoader num_workers=0, batch 16)"
    cost: float = 0.5  # the share of the run's time it costs (ranks the findings; 0.5 where not measured)


def _loader_words(loader: dict[str, Any]) -> str:
    parts = []
    if "num_workers" in loader:
        parts.append(f"num_workers={loader['num_workers']}")
    if "batch_size" in loader:
        parts.append(f"batch {loader['batch_size']}")
    return f" (DataLoader {', '.join(parts)})" if parts else ""


def _edge_words(loader: dict[str, Any]) -> str:
    """ "DataLoader num_workers=2, persistent_workers=False: its workers start again every epoch, by spawn" """
    workers = loader.get("num_workers")
    text = f"DataLoader num_workers={workers}" if workers is not None else "its DataLoader"
    if workers and not loader.get("persistent_workers"):
        text += ", persistent_workers=False: its workers start again every epoch"
        method = loader.get("start_method")
        text += f", by {method}" if method in ("spawn", "forkserver") else ""
    return text


def epoch_edge(telemetry: Any, rank: int | None) -> tuple[float, float] | None:
    """(share of the time, seconds per epoch) the rank waits at epochs' edges; None: not known or none."""
    feed = telemetry.feeding.ranks.get(rank) if rank is not None else None
    return feed.edge() if feed is not None else None


def slow_findings(telemetry: Any) -> list[Slowness]:
    """What makes the run slow, worst first; empty for a run that keeps its CPUs and GPUs fed."""
    out: list[Slowness] = []
    found = telemetry.feeding.input_bound()
    if found is not None:
        rank, share, loader = found
        feed = telemetry.feeding.ranks.get(rank)
        gpu = feed.gpu if feed is not None else None
        busy = f"; its GPU {gpu[0]} is {gpu[1]:.0f}% busy" if gpu is not None else ""
        edge = epoch_edge(telemetry, rank)
        if edge is not None and edge[0] >= share / 2:  # mostly at epochs' starts: say so, and what each costs
            text = (
                f"input-bound: {share:.0%} of the time waits for data, {edge[0]:.0%} at epochs' starts "
                f"({edge[1]:.1f} s each; {_edge_words(loader)}){busy}"
            )
        else:
            text = f"input-bound: {share:.0%} of each step waits for data{_loader_words(loader)}{busy}"
        out.append(Slowness("input_bound", rank, text, share))
    else:
        edges = [(edge, rank) for rank in telemetry.feeding.ranks if (edge := epoch_edge(telemetry, rank))]
        if edges and (worst := max(edges))[0][0] >= EPOCH_EDGE:
            (share, each), rank = worst
            loader = telemetry.feeding.ranks[rank].loader or {}
            text = f"epochs' starts take {share:.0%} of the time: {each:.1f} s each ({_edge_words(loader)})"
            out.append(Slowness("epoch_start", rank, text, share))
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
    if hasattr(telemetry, "use"):  # the GPU-side findings (gpu_slow.py), ranked with these by their cost
        out += gpu_findings(telemetry, Slowness)
        out.sort(key=lambda found: -found.cost)
    return out


def slow_advice(finding: Slowness, telemetry: Any, ranks: int, pace: float | None = None) -> list[Advice]:
    """The fixes for ``finding``, best first. ``pace``: the run's steps a second (what the row shows)."""
    if finding.kind == "oversubscribed":
        return _thread_advice(telemetry, ranks)
    if finding.kind in GPU_KINDS:
        return gpu_advice(finding.kind, finding.text, telemetry)
    feed = telemetry.feeding.ranks.get(finding.rank)
    loader: dict[str, Any] = (feed.loader if feed is not None else None) or {}
    share = feed.share() if feed is not None else None
    threads = (feed.threads if feed is not None else None) or {}
    cpus = int(threads.get("cpus") or os.cpu_count() or 1)
    memory = telemetry.memory.get(finding.rank)
    cuda = memory is not None and memory.device.startswith("cuda")
    workers = int(loader.get("num_workers") or 0)
    want = suggested_workers(ranks, cpus)
    edge = epoch_edge(telemetry, finding.rank)
    # Waits mostly at epochs' starts: keeping the workers comes first; more workers would start more each epoch,
    # and the batches themselves are no matter unless the rest of the wait is large on its own.
    edges = edge is not None and (finding.kind == "epoch_start" or edge[0] >= (share or 0.0) / 2)
    batches = finding.kind == "input_bound" and (not edges or (share or 0.0) - (edge or (0.0, 0.0))[0] >= 0.25)
    waits = f"rank {finding.rank} waits for data {share:.0%} of each step" if share is not None else "it waits"
    scored: list[tuple[int, Advice]] = []
    if workers < want and batches:
        scored.append(
            (
                35 if edges else 90,
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
    if batches:
        where = loader.get("getitem")
        name = loader.get("dataset") or "the dataset"
        scored.append(
            (
                30 if edges else 80 if workers >= want else 60,
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
        cost = _edge_cost(edge, pace) if edge is not None else ""
        scored.append(
            (
                95 if edges else 45,
                Advice(
                    "persistent_workers",
                    "keep the workers between epochs",
                    f"{workers} worker{'s start' if workers != 1 else ' starts'} again at every epoch "
                    f"(persistent_workers=False){cost}",
                    "DataLoader(..., persistent_workers=True)",
                ),
            )
        )
    method = loader.get("start_method")
    if workers and edges and method in ("spawn", "forkserver"):
        scored.append((85, _start_method_advice(str(method), bool(loader.get("persistent_workers")))))
    if workers:
        factor = int(loader.get("prefetch_factor") or 2)
        scored.append(
            (
                40,
                Advice(
                    "prefetch_factor",
                    "let each worker prepare more batches ahead",
                    f"prefetch_factor={factor}: each worker holds {factor} batches ready"
                    + ("; an epoch's first batches still wait for the workers to start" if edges else ""),
                    f"DataLoader(..., prefetch_factor={factor * 2}) (more memory per worker)",
                ),
            )
        )
    return [advice for _, advice in sorted(scored, key=lambda pair: -pair[0])]


def _edge_cost(edge: tuple[float, float], pace: float | None) -> str:
    """ ": each epoch's start waits 2.9 s, 84% of the time; the run makes 4.8 it/s, about 30.0 it/s without" """
    share, each = edge
    text = f": each epoch's start waits {each:.1f} s, {share:.0%} of the time"
    if pace and share < 0.99:
        text += f"; the run makes {rate_text(1 / pace)}, about {rate_text((1 - share) / pace)} without these waits"
    return text


def _start_method_advice(method: str, persistent: bool) -> Advice:
    again = "once" if persistent else "at every epoch"
    return Advice(
        "start_method",
        "make the workers cheaper to start",
        f"the workers start by {method}: each is a new Python that imports the main script's modules again "
        f"(torch, the dataset's) and unpickles the dataset, {again}",
        "persistent_workers=True starts them once; keep slow work at the script's top level under "
        "if __name__ == '__main__':; or DataLoader(..., multiprocessing_context='fork') where the workers use no CUDA",
    )


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
