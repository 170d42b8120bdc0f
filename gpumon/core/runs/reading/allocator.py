"""PyTorch's CUDA allocator as the run's events tell it (issue 52): its early warnings before an out-of-memory, and
the snapshot a rank kept at one.

Folded as the events arrive and kept in the summary (a few numbers per rank), never read from the history again:

- ``retries``: a CUDA rank's ``step`` events carry ``num_alloc_retries`` (``retries``): each one is a cudaMalloc
  that failed, after which PyTorch freed its whole cache and tried again. The count rising is the allocator at the
  edge of the GPU: the first time it rises, how many in the last minute is kept as the finding.
- ``fragmentation``: PyTorch holds far more than the step ever uses: ``reserved`` minus the step's ``peak``
  allocated above ``FRAG_SHARE`` of the device and ``FRAG_MIN`` bytes, in ``FRAG_SAMPLES`` samples in a row.
  The peak (reset each step) and not the allocated bytes at the step's end, which are low by nature (the
  activations are freed by then): what is reserved above the step's highest need is cache nothing uses.
- ``oom``: the ``oom_snapshot`` event (telemetry/cuda_history.py): the largest blocks and the kept snapshot.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpumon.core.runs.record.values import event_number

WINDOW_S = 60.0  # "in the last minute"
FRAG_SHARE = 0.30  # reserved above the step's peak: this share of the device...
FRAG_MIN = 2 * 1024**3  # ...and at least this many bytes
FRAG_SAMPLES = 3  # in this many samples in a row (one step that freed a big buffer is not fragmentation)


@dataclass
class RankAllocator:
    total: int | None = None  # the device's bytes (``device`` event)
    retries: int = 0  # num_alloc_retries at its latest sample
    ooms: int = 0  # num_ooms (OOMs the script caught and went on from count too)
    recent: list[tuple[float, int]] = field(default_factory=list)  # (t, retries): the last minute, 1 s apart
    over: int = 0  # samples in a row over the fragmentation rule
    alloc_retries: dict[str, Any] | None = None  # the first rise: t, step, count (in the last minute), total
    fragmentation: dict[str, Any] | None = None  # the first time the rule held: t, step, reserved, peak, total
    oom: dict[str, Any] | None = None  # the oom_snapshot event's fields

    def step(self, event: dict[str, Any]) -> None:
        t, step = event_number(event.get("t")) or 0.0, event.get("step")
        retries, ooms = _int(event.get("retries")), _int(event.get("ooms"))
        if ooms is not None:
            self.ooms = ooms
        if retries is not None:
            self._retries(t, step, retries)
        reserved, peak = _int(event.get("reserved")), _int(event.get("peak"))
        peak = peak if peak is not None else _int(event.get("alloc"))
        if reserved is None or peak is None or not self.total:
            return
        unused = reserved - peak
        self.over = self.over + 1 if unused > max(FRAG_MIN, FRAG_SHARE * self.total) else 0
        if self.over >= FRAG_SAMPLES and self.fragmentation is None:
            self.fragmentation = {"t": t, "step": step, "reserved": reserved, "peak": peak, "total": self.total}

    def _retries(self, t: float, step: Any, retries: int) -> None:
        if not self.recent or t - self.recent[-1][0] >= 1.0:  # a sample a second: the list stays short and cheap
            self.recent.append((t, retries))
            while len(self.recent) > 1 and self.recent[0][0] < t - WINDOW_S:
                del self.recent[0]
        if retries > self.retries and self.alloc_retries is None:
            before = min(self.recent[0][1], self.retries)  # the count at the start of the last minute
            self.alloc_retries = {"t": t, "step": step, "count": retries - before, "total": retries}
        self.retries = max(self.retries, retries)


@dataclass
class Allocator:
    ranks: dict[int, RankAllocator] = field(default_factory=dict)

    def fold(self, kind: str, event: dict[str, Any], rank: int) -> None:
        if kind == "step" and event.get("dev") != "cpu":
            self.ranks.setdefault(rank, RankAllocator()).step(event)
        elif kind == "device" and isinstance(event.get("total"), int):
            self.ranks.setdefault(rank, RankAllocator()).total = event["total"]
        elif kind == "oom_snapshot" and isinstance(event.get("largest"), list):
            keep = ("t", "dev", "tried", "free", "snapshot", "largest")
            self.ranks.setdefault(rank, RankAllocator()).oom = {k: event.get(k) for k in keep} | {"rank": rank}

    def first(self, what: str) -> tuple[int, dict[str, Any]] | None:
        """The earliest rank's finding ``what`` ("alloc_retries", "fragmentation", "oom"), with its rank."""
        found = [(f["t"] or 0.0, rank, f) for rank, a in self.ranks.items() if (f := getattr(a, what)) is not None]
        return (min(found, key=lambda x: (x[0], x[1]))[1:]) if found else None

    def oom_of(self, rank: int | None) -> dict[str, Any] | None:
        """The snapshot ``rank`` kept at its OOM, else the first any rank kept."""
        mine = self.ranks.get(rank) if rank is not None else None
        if mine is not None and mine.oom is not None:
            return mine.oom
        first = self.first("oom")
        return first[1] if first else None

    def to_state(self) -> dict[str, Any]:
        return {str(r): asdict(a) for r, a in self.ranks.items()}

    @classmethod
    def from_state(cls, state: Any) -> Allocator:
        ranks: dict[int, RankAllocator] = {}
        for rank, saved in state.items() if isinstance(state, dict) else ():
            if isinstance(saved, dict):
                saved = {**saved, "recent": [tuple(pair) for pair in saved.get("recent") or ()]}
                ranks[int(rank)] = RankAllocator(**{k: v for k, v in saved.items() if k in _FIELDS})
        return cls(ranks)


_FIELDS = frozenset(RankAllocator.__dataclass_fields__)


def _int(value: Any) -> int | None:
    return value if type(value) is int else None
