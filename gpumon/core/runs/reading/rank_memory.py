"""One rank's memory per iteration, as the run's fold keeps it (telemetry.py) and its summary saves it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpumon.core.runs.reading.series import Series

MAX_LEFT = 256  # censuses' residues kept in a summary: a few looks a request, a few requests a run


class MemoryWatch(Protocol):
    """What folds memory samples as they arrive (the doctor's LeakWatch)."""

    def step(
        self, rank: int, device: str, capacity: int | None, step: int, used: float | None, heap: float | None
    ) -> None: ...

    def looked(self, rank: int, step: int, left: int) -> None:
        """A census of ``rank`` after ``step``'s sample left ``left`` bytes in its heap (``census_left``)."""


@dataclass
class RankMemory:
    """Per-iteration memory of one rank: CUDA allocated bytes, or the live heap on a CPU."""

    device: str = "cpu"
    used: Series = field(default_factory=Series)  # CUDA allocated / CPU heap
    reserved: Series = field(default_factory=Series)  # CUDA reserved / CPU RSS
    heap: Series = field(default_factory=Series)  # CUDA ranks: the host's live heap (autograd graphs live there)
    peak: int | None = None
    capacity: int | None = None  # CUDA ranks: the device's total bytes (its ``device`` event)
    # (step, bytes) each census left in the heap before that step's sample (``census_left``), for a late watcher
    left: list[tuple[int, int]] = field(default_factory=list)

    def census_left(self, step: int, left: int) -> None:
        """A census left ``left`` bytes in the heap before ``step``'s sample (bounded: the oldest go)."""
        self.left.append((step, left))
        del self.left[:-MAX_LEFT]

    def points(self) -> Iterator[tuple[int, float | None, float | None]]:
        """(step, primary, host heap) from the downsampled series: a late watcher's first look."""
        primary = self.used if len(self.used) else self.reserved
        yield from ((step, value, None) for step, value in zip(primary.steps, primary.values, strict=True))
        yield from ((step, None, value) for step, value in zip(self.heap.steps, self.heap.values, strict=True))

    def to_state(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "used": self.used.to_state(),
            "reserved": self.reserved.last,
            "heap": self.heap.to_state(),
            "peak": self.peak,
            "capacity": self.capacity,
            "left": self.left[-MAX_LEFT:],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RankMemory:
        memory = cls(str(state["device"]), Series.from_state(state["used"]), heap=Series.from_state(state["heap"]))
        if isinstance(state.get("reserved"), int | float):
            memory.reserved.add(memory.used.steps[-1] if memory.used.steps else 0, float(state["reserved"]))
        memory.peak, memory.capacity = state.get("peak"), state.get("capacity")
        memory.left = [(int(s), int(b)) for s, b in state.get("left") or ()]
        return memory


def peak_memory(memory: dict[int, RankMemory]) -> tuple[int | None, str]:
    """The largest latest per-rank memory and what it measures ("cuda" or "heap")."""
    latest = [(m.used.last, m.device) for m in memory.values() if m.used.last is not None]
    if not latest:
        return None, ""
    value, device = max(latest, key=lambda x: x[0] or 0)
    return int(value or 0), "heap" if device == "cpu" else device


def largest_rss(memory: dict[int, RankMemory]) -> int | None:
    """The largest latest resident set of the CPU ranks (what top shows beside the live heap)."""
    values = [m.reserved.last for m in memory.values() if m.device == "cpu" and m.reserved.last is not None]
    return int(max(values)) if values else None
