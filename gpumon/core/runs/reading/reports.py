"""What a trainer's report held, kept whole: the latest ``ray.train.report`` of each rank (``metrics`` events of a
``REPORTED`` source), shown as the run's ``reported`` (the lowest rank's: Ray Train's result keeps rank 0's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumon.core.runs.reading.sources import REPORTED, source_of


@dataclass
class Reports:
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> {"source", "step", "metrics"}

    def fold(self, kind: str, event: dict[str, Any], rank: int) -> None:
        metrics, step = event.get("metrics"), event.get("step")
        if kind == "metrics" and isinstance(metrics, dict) and (source := source_of(event)) in REPORTED:
            step = step if isinstance(step, int) and not isinstance(step, bool) else None
            self.ranks[rank] = {"source": source, "step": step, "metrics": dict(metrics)}

    @property
    def latest(self) -> dict[str, Any] | None:
        return self.ranks[min(self.ranks)] if self.ranks else None

    def to_state(self) -> dict[str, Any]:
        return {str(r): v for r, v in self.ranks.items()}

    @classmethod
    def from_state(cls, state: Any) -> Reports:
        items = state.items() if isinstance(state, dict) else ()
        return cls({int(r): dict(v) for r, v in items if isinstance(v, dict)})
