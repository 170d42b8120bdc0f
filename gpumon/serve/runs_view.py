"""A run as serve shows it: one plain dict per run, the same numbers for /metrics, /api/ and the page.

Built from what gpumon already keeps (``RunSummary``, the supervisor's fold), never from the raw events.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

from gpumon.core.runs.reading.progress import ROW_FIELDS
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.reading.use import USE_FIELDS
from gpumon.core.runs.record.listing import lane_fields

#: Seconds per step: the buckets of ``gpumon_run_step_seconds``.
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SERIES_POINTS = 300  # the loss points a run carries to the page (the summary keeps up to 2,000)


@dataclass
class StepHistogram:
    """Seconds per step between two polls (the run's steps and the wall clock): each poll where the run took
    n steps in dt seconds observes dt/n, n times. ``sum / count`` is the run's mean step by the wall clock;
    the buckets are of poll-long averages (about a second), not of single steps."""

    buckets: list[int] = field(default_factory=lambda: [0] * len(STEP_BUCKETS))
    count: int = 0
    total: float = 0.0
    last: tuple[int, float] | None = None  # (step, when serve saw it)

    def see(self, step: int | None, now: float) -> None:
        if step is None:
            return
        if self.last is not None and step > self.last[0] and now > self.last[1]:
            n, dt = step - self.last[0], now - self.last[1]
            per = dt / n
            i = bisect.bisect_left(STEP_BUCKETS, per)
            if i < len(self.buckets):
                self.buckets[i] += n
            self.count += n
            self.total += dt
        if self.last is None or step != self.last[0]:
            self.last = (step, now)

    def copy(self) -> StepHistogram:
        return StepHistogram(list(self.buckets), self.count, self.total, self.last)

    def cumulative(self) -> list[tuple[str, int]]:
        out, acc = [], 0
        for bound, n in zip(STEP_BUCKETS, self.buckets, strict=True):
            acc += n
            out.append((str(bound), acc))
        out.append(("+Inf", self.count))
        return out


def run_doc(summary: RunSummary, host: str, extra: dict[str, Any], series: bool) -> dict[str, Any]:
    """One run's numbers. ``extra``: what the monitor's live fold adds (last step time, NaN count, headline)."""
    spec = summary.record.spec
    ranks = []
    lanes = {lane["rank"]: lane for lane in summary.lanes}
    for row in summary.ranks:
        leak = summary.leaks.get(row.rank)
        ranks.append(
            {
                "rank": row.rank,
                "pid": row.pid,
                "step": row.step,
                "host": row.host or host,
                "memory_bytes": leak.current if leak is not None else None,
                "growth_bytes_per_step": leak.slope if leak is not None and leak.samples else None,
                "memory_state": leak.state if leak is not None else None,
                "memory_leak": leak.alarm if leak is not None else None,  # the detector's: fills before the end
                **lane_fields(lanes.get(row.rank)),  # score, own_s, wait_s (lanes.py)
            }
        )
    doc: dict[str, Any] = {
        "id": summary.id,
        "name": spec.name or "",
        "kind": spec.kind,
        "state": summary.state,
        "host": host,
        "live": summary.record.live,
        "created": summary.record.created,
        "step": summary.step,
        "loss": summary.loss,
        "loss_source": summary.loss_source,
        "loss_note": summary.loss_note,
        "samples_per_s": summary.samples_per_s,
        # progress, ETA, pace, quiet (progress.py) and mfu, tokens_per_s, flops_per_step (use.py): the fields of
        # ``gpumon runs --json``, by the same names, never another read
        **{key: getattr(summary, key) for key in ROW_FIELDS},
        **{key: summary.use.get(key) for key in USE_FIELDS},
        "data_wait": summary.data_wait,
        "memory_bytes": summary.memory,
        "memory_kind": summary.memory_kind,
        "alerts": list(summary.alerts),
        "warnings": list(summary.warnings),
        "exception": summary.exception,
        "attempt": summary.attempt,
        "restarts": list(summary.restarts),  # each failed attempt (attempts.py Restart)
        "reported": summary.reported,  # the latest ray.train.report (rank 0's)
        "ranks": ranks,
        "stall": summary.record.status.get("stall"),  # while stalled: where each rank waits, its last collective
        **extra,
    }
    if series:
        doc["loss_series"] = thin(summary.loss_steps, summary.loss_values)
    return doc


def thin(steps: tuple[int, ...], values: tuple[float, ...]) -> list[list[float]]:
    """At most ``SERIES_POINTS`` (step, loss) pairs, the last one always kept; finite values only."""
    pairs = [(s, v) for s, v in zip(steps, values, strict=False) if math.isfinite(v)]
    if len(pairs) > SERIES_POINTS:
        every = len(pairs) / SERIES_POINTS
        pairs = [pairs[int(i * every)] for i in range(SERIES_POINTS - 1)] + [pairs[-1]]
    return [[s, v] for s, v in pairs]
