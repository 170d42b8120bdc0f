"""Each rank's own work against its wait in collectives: what names the slow rank of a lock-step run (issue 51).

Folded from the ranks' ``step`` events: ``dt`` between events, ``bw`` (seconds a step in ``backward()``, where
DDP's reducer waits for its peers), ``coll`` (seconds a step inside torch.distributed's collectives, an async
one's ``wait()`` included) and ``wait`` (the DataLoader's), all measured in the ranks (telemetry/collectives.py).
Per rank, over the last ``WINDOW_S`` seconds that had steps (one bucket a second, so the cost is the same for an
hour or a week):

- ``wait_r = coll_r + (bw_r - min over ranks of bw)``: a fast rank waits inside backward too (DDP overlaps the
  gradients' all-reduce with it; the backward's compute is alike on every rank, the surplus is waiting);
- ``own_r = step_r - wait_r``;
- ``score_r = min(own) / own_r``: 1.0 as fast as the fastest, 0.5 twice as slow (nvidia-resiliency-ext's
  "relative" score). Below ``FLAG`` a rank is slow; once a second the ranks are judged and the time each has
  stayed below is kept, so the doctor (core/doctor/straggler.py) names a rank slow for long enough.

Only where the ranks step on the CPU. On a GPU the collectives (NCCL's) and backward's kernels run on the device's
streams while the host goes on: the host's clocks see their launch, and a fast rank's wait lands wherever it next
synchronises (``loss.item()``), which these sums would count as its own work, the fast rank named slow. There the
lanes are unknown, with that reason (``unknown``), until the device's own timing is read.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpumon.core.runs.record.values import event_number

WINDOW_S = 30  # seconds of steps a score reads: long enough to smooth a slow batch, short enough to follow
FLAG = 0.7  # nvidia-resiliency-ext's authors flag a rank below this
MIN_STEPS = 8
MIN_SPAN_S = 2.0
PAUSE_FACTOR = 20.0  # an interval this many times the rank's usual step is a pause (feeding.py's), left out


@dataclass(frozen=True)
class Lane:
    """One rank's seconds a step, over the window: where its time goes."""

    rank: int
    step_s: float
    own_s: float  # its own work: data, forward, backward's compute, the optimizer
    wait_s: float  # waiting for its peers: in collectives, and in backward beyond the fastest backward
    coll_s: float  # the part of wait_s inside the collectives the script calls (the rest: in DDP's backward)
    data_s: float | None  # its DataLoader wait (inside own_s)
    score: float  # min(own) / own_s
    cpu_s: float | None = None  # its process's CPU seconds a step (every thread): computing, against waiting

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "score": round(self.score, 3), "own_s": round(self.own_s, 6),
                "wait_s": round(self.wait_s, 6), "coll_s": round(self.coll_s, 6), "step_s": round(self.step_s, 6),
                "data_s": None if self.data_s is None else round(self.data_s, 6),
                "cpu_s": None if self.cpu_s is None else round(self.cpu_s, 6)}  # fmt: skip


@dataclass
class RankClock:
    # [second, elapsed, backward, collectives, data wait, steps, CPU] per second of the rank's step events
    recent: deque[list[float]] = field(default_factory=lambda: deque(maxlen=WINDOW_S))
    last: tuple[int, float] | None = None  # (step, time) of the previous step event
    per_step: deque[float] = field(default_factory=lambda: deque(maxlen=31))
    data: bool = False  # it reported a DataLoader wait
    cpu: bool = False  # it reported its CPU time
    device: str = ""  # the device its steps ran on ("cpu", "cuda:0"), as its latest step event said

    def sums(self) -> tuple[float, float, float, float, float, float] | None:
        """(elapsed, backward, collectives, data, steps, CPU) over the window; None: too few steps yet."""
        totals = [sum(bucket[i] for bucket in self.recent) for i in range(1, 7)]
        if totals[4] < MIN_STEPS or totals[0] < MIN_SPAN_S:
            return None
        return totals[0], totals[1], totals[2], totals[3], totals[4], totals[5]


@dataclass
class Lanes:
    clocks: dict[int, RankClock] = field(default_factory=dict)
    low_since: dict[int, float] = field(default_factory=dict)  # rank -> when its score fell below FLAG
    judged: float | None = None  # the event time of the latest judgement (once a second)
    saved: tuple[Lane, ...] = ()  # what a summary said, until the window fills again
    tried: float | None = None  # the event time of the latest look (not saved)
    saved_unknown: str | None = None  # what a summary said of why there are no lanes

    def step(self, rank: int, event: dict[str, Any], step: int) -> None:
        t = event.get("t")
        if not isinstance(t, int | float) or isinstance(t, bool):
            return
        bw, coll = event_number(event.get("bw")), event_number(event.get("coll"))
        clock = self.clocks.setdefault(rank, RankClock())
        last, clock.last = clock.last, (step, float(t))
        if last is None or step <= last[0] or t <= last[1]:
            return  # the first step holds start-up
        steps = step - last[0]
        elapsed = float(t) - last[1]
        usual = statistics.median(clock.per_step) if len(clock.per_step) >= 5 else None
        clock.per_step.append(elapsed / steps)
        if usual is not None and elapsed / steps > PAUSE_FACTOR * usual:
            return  # a pause (a checkpoint, an evaluation, a stop): nobody's own work nor wait
        if isinstance(event.get("dev"), str):
            clock.device = event["dev"]
        wait, cpu = event_number(event.get("wait")), event_number(event.get("cpu"))
        clock.data = clock.data or wait is not None
        clock.cpu = clock.cpu or cpu is not None
        second = float(int(t))
        if not clock.recent or clock.recent[-1][0] != second:
            clock.recent.append([second, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        added = (elapsed, (bw or 0.0) * steps, (coll or 0.0) * steps, (wait or 0.0) * steps, float(steps),
                 (cpu or 0.0) * steps)  # fmt: skip
        for i, value in enumerate(added, 1):
            clock.recent[-1][i] += value
        if self.tried is None or t - self.tried >= 1.0:  # once a second, whatever the step rate
            self.tried = float(t)
            self._judge(float(t))

    def _judge(self, now: float) -> None:
        lanes = self._measure()
        if not lanes:
            return  # not measured (yet): a reader that resumed from a summary keeps what the summary judged
        self.judged = now
        for lane in lanes:
            if lane.score < FLAG:
                self.low_since.setdefault(lane.rank, now)
            else:
                self.low_since.pop(lane.rank, None)
        for rank in [r for r in self.low_since if all(lane.rank != r for lane in lanes)]:
            del self.low_since[rank]  # not measured now: not known slow
        self.saved = ()

    def _measure(self) -> tuple[Lane, ...]:
        sums = {rank: s for rank, clock in self.clocks.items() if (s := clock.sums()) is not None}
        sums = {rank: s for rank, s in sums.items() if s[1] or s[2]}  # the ranks that timed backward or collectives
        if len(sums) < 2 or self.unknown():
            return ()
        per = {rank: (e / n, b / n, c / n, d / n, u / n) for rank, (e, b, c, d, n, u) in sums.items()}
        fastest_bw = min(values[1] for values in per.values())
        raw = {}
        for rank, (step_s, bw, coll, data, cpu) in per.items():
            wait = min(step_s, coll + bw - fastest_bw)
            clock = self.clocks[rank]
            raw[rank] = (step_s, max(step_s - wait, 1e-9), wait, min(coll, wait), data if clock.data else None,
                         cpu if clock.cpu else None)  # fmt: skip
        best = min(values[1] for values in raw.values())
        return tuple(
            Lane(r, step_s, own, wait, coll, data, best / own, cpu)
            for r, (step_s, own, wait, coll, data, cpu) in sorted(raw.items())
        )

    def lanes(self) -> tuple[Lane, ...]:
        """Every measured rank's lane, lowest rank first; () with fewer than two ranks that time collectives."""
        return () if self.unknown() else self._measure() or self.saved

    def unknown(self) -> str | None:
        """Why the lanes cannot be measured from the host's clocks (a rank steps on an accelerator); None where
        they can."""
        if len(self.clocks) < 2:
            return self.saved_unknown  # one rank has no lanes; a summary's word until the ranks step again
        device = next((c.device for c in self.clocks.values() if c.device and not c.device.startswith("cpu")), "")
        if not device:
            return None
        return (f"unknown on {device.split(':')[0]}: its collectives and kernels run on the device's streams, where "
                "the host's clocks cannot tell a rank's own work from its wait")  # fmt: skip

    def low_for(self, rank: int) -> float:
        """Seconds ``rank`` has stayed below FLAG, up to the latest judgement (0.0: it is not below)."""
        since = self.low_since.get(rank)
        return max(0.0, (self.judged or since or 0.0) - since) if since is not None else 0.0

    def to_state(self) -> dict[str, Any]:
        return {
            "lanes": [lane.to_dict() for lane in self.lanes()],
            "low_since": {str(r): t for r, t in self.low_since.items()},
            "judged": self.judged,
            "unknown": self.unknown(),
        }

    @classmethod
    def from_state(cls, state: Any) -> Lanes:
        out = cls()
        if not isinstance(state, dict):
            return out
        judged = event_number(state.get("judged"))
        out.judged = judged
        low = state.get("low_since")
        low = low if isinstance(low, dict) else {}
        out.low_since = {int(r): float(t) for r, t in low.items() if str(r).isdigit() and event_number(t) is not None}
        saved = []
        for item in state.get("lanes") or ():
            if isinstance(item, dict) and type(item.get("rank")) is int:
                saved.append(
                    Lane(item["rank"], float(item["step_s"]), float(item["own_s"]), float(item["wait_s"]),
                         float(item.get("coll_s") or 0.0), event_number(item.get("data_s")), float(item["score"]),
                         event_number(item.get("cpu_s")))
                )  # fmt: skip
        out.saved = tuple(saved)
        out.saved_unknown = state["unknown"] if isinstance(state.get("unknown"), str) else None
        return out


def ms(seconds: float) -> str:
    """ "41 ms" a step; "12.3 s" past ten seconds."""
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
