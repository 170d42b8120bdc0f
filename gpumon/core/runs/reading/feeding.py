"""Is the run waiting for its data, or fighting over CPUs? Folded from the ranks' ``step`` events (their
``wait``: DataLoader seconds per step), ``dataloader`` and ``threads`` events (telemetry/feeding.py).

Input-bound: over a rank's steps of the last ``WINDOW_S`` seconds that had steps (one bucket a second, at
least ``MIN_STEPS`` steps covering ``MIN_SPAN_S`` seconds), the share of wall time spent inside the
DataLoader (``__iter__`` and ``__next__``) is at least ``INPUT_BOUND``. Measured here (2 CPUs,
docs/benchmarks.md "Data wait"): a loop decoding in ``__getitem__`` with ``num_workers=0`` waits 46-75% of
each step (more as the decoding grows); the same loops with 2-4 workers 0-14%; gpumon's trainers and the
public examples of docs/public-code.md stay near 0. Half is well clear of the healthy runs and catches the
issue's 74%. The window is two minutes, as the run's pace (progress.py): it holds several epochs' starts of
a loader whose workers start again each epoch.

Long intervals: an interval between step events longer than ``PAUSE_FACTOR`` times the rank's usual step is a
pause (a SIGSTOP, a stall, a checkpoint, an evaluation), left out; but what the rank measured of it at an
epoch's edge (``epoch_wait``: workers starting again, the first batch, workers stopping) is data wait and
counts, however long. A rank stopped inside ``__next__`` in mid-epoch thus stays a pause. One stopped in an
epoch's first batch is told apart by the supervisor, which sees its process stopped: the ``stall`` event
(verdict ``stopped``) pauses every rank over the intervals that span its ``since``, and what was counted of
them is taken back.

Oversubscribed: the ranks on one host run more intra-op threads together than the host gives them CPUs
(torch starts one per core in every process; torchrun sets OMP_NUM_THREADS=1 for this reason, mp.spawn
and hand-started ranks do not).
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpumon.core.runs.record.values import event_number

INPUT_BOUND = 0.5
# An interval between step events this many times the rank's usual step is a pause (SIGSTOP, a stall, a
# checkpoint), not feeding: left out, or a rank stopped inside __next__ reads input-bound (seen on Lightning's
# BoringModel stopped for 12 s), and one stopped elsewhere hides a real wait. The stall rule's own factor.
# Its epoch-edge wait is not part of the judged interval: it counts (issue 33, workers started each epoch).
PAUSE_FACTOR = 20.0
WINDOW_S = 120
STOPPED_S = 4.0  # the stall watch's (runs/supervision/stall.py): no shorter stop makes a ``stall`` event
MIN_STEPS = 10
MIN_SPAN_S = 5.0


@dataclass
class RankFeed:
    # [second, elapsed, waited, steps, edge, epochs] per second of the rank's step events: bounded whatever its
    # speed (edge: the seconds waited at epochs' edges, epochs: how many began; both within ``waited``)
    recent: deque[list[float]] = field(default_factory=lambda: deque(maxlen=WINDOW_S))
    last: tuple[int, float] | None = None  # (step, time) of the previous step event
    saved: float | None = None  # the share a summary said, until new steps come
    saved_edge: tuple[float, float] | None = None  # (edge share, seconds an epoch's start waits) likewise
    loader: dict[str, Any] | None = None  # the latest ``dataloader`` event's fields
    threads: dict[str, Any] | None = None  # the latest ``threads`` event's fields
    gpu: tuple[int, float] | None = None  # (GPU, utilisation %) from the supervisor's latest ``gpu_use``
    per_step: deque[float] = field(default_factory=lambda: deque(maxlen=31))  # recent seconds per step
    samples: deque[float] = field(default_factory=lambda: deque(maxlen=15))  # recent samples per step (``samples``)
    saved_samples: float | None = None  # what a summary said, until new ones come
    # (start, end, its bucket, what it added) of the latest intervals long enough to hold a stop
    long: deque[tuple[float, float, list[float], tuple[float, ...]]] = field(default_factory=lambda: deque(maxlen=8))

    def _known(self) -> bool:
        elapsed = sum(bucket[1] for bucket in self.recent)
        return elapsed >= MIN_SPAN_S and sum(bucket[3] for bucket in self.recent) >= MIN_STEPS

    def share(self) -> float | None:
        """Seconds waiting for data per second of training, over the recent window; None: too few steps."""
        if not self._known():
            return self.saved
        return min(1.0, sum(bucket[2] for bucket in self.recent) / sum(bucket[1] for bucket in self.recent))

    def samples_per_step(self) -> float | None:
        """The DataLoader's samples per step, the median of the recent intervals (an evaluation's batches
        between two steps make one stand out); None where no batch size is known."""
        return statistics.median(self.samples) if self.samples else self.saved_samples

    def edge(self) -> tuple[float, float] | None:
        """(the share of the window waited at epochs' edges, seconds waited per epoch begun); None: too few
        steps, or no epoch began in the window."""
        if not self._known():
            return self.saved_edge
        epochs = sum(bucket[5] for bucket in self.recent)
        if not epochs:
            return None
        waited = sum(bucket[4] for bucket in self.recent)
        return min(1.0, waited / sum(bucket[1] for bucket in self.recent)), waited / epochs


_LOADER_KEYS: tuple[str, ...] = ("num_workers", "batch_size", "pin_memory", "persistent_workers", "prefetch_factor")
_LOADER_KEYS += ("start_method", "dataset", "getitem", "getitem_path")


@dataclass
class Feeding:
    ranks: dict[int, RankFeed] = field(default_factory=dict)
    idle: dict[str, str] = field(default_factory=dict)  # pid -> "GPU held idle: ..." (the supervisor's gpu_idle)
    stops: list[float] = field(default_factory=list)  # ``since`` of the stalls that saw a rank stopped

    def gpu(self, kind: str, event: dict[str, Any]) -> None:
        pid = str(event.get("pid"))
        if kind == "gpu_idle" and isinstance(event.get("text"), str):
            self.idle[pid] = event["text"]
        else:
            self.idle.pop(pid, None)

    def gpu_use(self, rank: int, event: dict[str, Any]) -> None:
        gpu, util = event.get("gpu"), event.get("util")
        if isinstance(gpu, int) and isinstance(util, int | float):
            self.ranks.setdefault(rank, RankFeed()).gpu = (gpu, float(util))

    def step(self, rank: int, event: dict[str, Any], step: int) -> None:
        wait, t = event.get("wait"), event.get("t")
        if not isinstance(t, int | float):
            return
        feed = self.ranks.setdefault(rank, RankFeed())
        if (samples := event_number(event.get("samples"))) is not None and samples > 0:
            feed.samples.append(samples)
        last, feed.last = feed.last, (step, float(t))
        if not isinstance(wait, int | float) or last is None or step <= last[0] or t <= last[1]:
            return  # the first step holds start-up: no share from it
        steps = step - last[0]
        span = elapsed = float(t) - last[1]
        edge = event_number(event.get("epoch_wait"))
        edge = min(edge * steps, elapsed) if edge is not None else 0.0
        waited = max(edge, min(float(wait) * steps, elapsed))
        rest = elapsed - edge  # the interval less its epoch-edge wait: steps, or a pause
        usual = statistics.median(feed.per_step) if len(feed.per_step) >= 5 else None
        feed.per_step.append(rest / steps)
        if any(_spans(last[1], float(t), since) for since in self.stops):
            return  # the supervisor saw a rank stopped (SIGSTOP) in this interval: nothing in it is feeding
        if usual is not None and rest / steps > PAUSE_FACTOR * usual:
            if not edge:
                return  # a pause: neither training nor feeding
            elapsed = waited = edge  # ... but the workers' start inside it is data wait
        second = float(int(t))
        if not feed.recent or feed.recent[-1][0] != second:
            feed.recent.append([second, 0.0, 0.0, 0.0, 0.0, 0.0])
        epochs = event["epochs"] if type(event.get("epochs")) is int else 0
        added = (elapsed, waited, float(steps), edge, float(epochs))
        for i, value in enumerate(added, 1):
            feed.recent[-1][i] += value
        if span >= STOPPED_S:  # kept a while: a stall event folded after it may take it back
            feed.long.append((last[1], float(t), feed.recent[-1], added))
        feed.saved = feed.saved_edge = None

    def stall(self, event: dict[str, Any]) -> None:
        """The supervisor's ``stall`` event. A rank seen stopped (verdict ``stopped``) after its step at ``since``
        pauses every rank (the others wait for it): the intervals that span that moment are no data wait, and
        what was counted of them is taken back (the ranks' step events may be folded before this one)."""
        since = event_number(event.get("since"))
        if event.get("verdict") != "stopped" or since is None:
            return
        self.stops = [*self.stops[-7:], since]
        for feed in self.ranks.values():
            for start, end, bucket, added in feed.long:
                if _spans(start, end, since) and any(kept is bucket for kept in feed.recent):
                    for i, value in enumerate(added, 1):
                        bucket[i] -= value
            feed.long = deque((e for e in feed.long if not _spans(e[0], e[1], since)), maxlen=feed.long.maxlen)

    def loader(self, rank: int, event: dict[str, Any]) -> None:
        info = {k: event[k] for k in _LOADER_KEYS if isinstance(event.get(k), int | str | bool)}
        self.ranks.setdefault(rank, RankFeed()).loader = info

    def threads(self, rank: int, event: dict[str, Any]) -> None:
        info = {k: event[k] for k in ("threads", "cpus", "host", "omp") if isinstance(event.get(k), int | str)}
        self.ranks.setdefault(rank, RankFeed()).threads = info

    def to_state(self) -> dict[str, Any]:
        ranks: dict[str, Any] = {
            str(rank): {
                "share": feed.share(),
                "edge": feed.edge(),
                "loader": feed.loader,
                "threads": feed.threads,
                "gpu": feed.gpu,
                "samples": feed.samples_per_step(),
            }
            for rank, feed in self.ranks.items()
        }
        if self.stops:
            ranks["stops"] = self.stops
        return {**ranks, "idle": self.idle} if self.idle else ranks

    @classmethod
    def from_state(cls, state: Any) -> Feeding:
        out = cls()
        if isinstance(state, dict) and isinstance(state.get("idle"), dict):
            out.idle = {str(k): str(v) for k, v in state["idle"].items()}
        if isinstance(state, dict) and isinstance(state.get("stops"), list):
            out.stops = [float(since) for since in state["stops"] if isinstance(since, int | float)]
        for rank, saved in (state or {}).items() if isinstance(state, dict) else ():
            if isinstance(saved, dict) and str(rank).isdigit():
                share, gpu, edge = saved.get("share"), saved.get("gpu"), saved.get("edge")
                samples = event_number(saved.get("samples"))
                out.ranks[int(rank)] = RankFeed(
                    gpu=(int(gpu[0]), float(gpu[1])) if isinstance(gpu, list | tuple) and len(gpu) == 2 else None,
                    saved=float(share) if isinstance(share, int | float) else None,
                    saved_edge=(float(edge[0]), float(edge[1])) if isinstance(edge, list) and len(edge) == 2 else None,
                    loader=saved.get("loader") if isinstance(saved.get("loader"), dict) else None,
                    threads=saved.get("threads") if isinstance(saved.get("threads"), dict) else None,
                    saved_samples=samples,
                )
        return out

    # -- verdicts ---------------------------------------------------------------------------------------
    def input_bound(self) -> tuple[int, float, dict[str, Any]] | None:
        """(rank, share, its loader) of the rank that waits most, when it waits at least INPUT_BOUND."""
        shares = [(feed.share(), rank, feed) for rank, feed in self.ranks.items()]
        known = [(share, rank, feed) for share, rank, feed in shares if share is not None]
        if not known:
            return None
        share, rank, feed = max(known, key=lambda item: item[0])
        return (rank, share, feed.loader or {}) if share >= INPUT_BOUND else None

    def samples_per_step(self) -> float | None:
        """The run's samples per step: each rank's DataLoader's, added (data-parallel ranks each draw their
        own); None where no rank's batch size is known."""
        known = [n for feed in self.ranks.values() if (n := feed.samples_per_step()) is not None]
        return sum(known) if known else None

    def wait_share(self) -> float | None:
        shares = [s for feed in self.ranks.values() if (s := feed.share()) is not None]
        return max(shares) if shares else None

    def oversubscribed(self) -> tuple[str, int, int, int, int] | None:
        """(host, ranks, threads in all, CPUs, DataLoader workers) for a host whose ranks run more intra-op
        threads than it has CPUs for them; None when none does."""
        hosts: dict[str, list[RankFeed]] = {}
        for feed in self.ranks.values():
            if feed.threads and isinstance(feed.threads.get("threads"), int):
                hosts.setdefault(str(feed.threads.get("host", "")), []).append(feed)
        for host, feeds in hosts.items():
            threads = sum(int(f.threads["threads"]) for f in feeds if f.threads)
            cpus = max(int(f.threads.get("cpus") or 1) for f in feeds if f.threads)
            workers = sum(int((f.loader or {}).get("num_workers") or 0) for f in feeds)
            if threads > cpus:
                return host, len(feeds), threads, cpus, workers
        return None


def _spans(start: float, end: float, since: float) -> bool:
    """The interval holds the stop after the step at ``since``: it ends after it and began by then (a second's
    leeway: the other ranks' last steps before it)."""
    return start <= since + 1.0 and end > since


def suggested_workers(ranks: int, cpus: int | None = None) -> int:
    """DataLoader workers per rank for this machine: the CPUs left after one per rank, shared, at most 8."""
    cpus = cpus or os.cpu_count() or 1
    return max(1, min(8, (cpus - ranks) // max(1, ranks)))
