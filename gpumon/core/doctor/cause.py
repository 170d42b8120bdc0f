"""What the doctor names as the cause of memory that grows: from a tensor census (causes.py) or a tracemalloc
window (python_growth.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    kind: str  # one of KINDS
    title: str
    advice: str
    evidence: str  # what the censuses saw: counts, shapes, sizes
    rank: int = 0
    steps: int = 0  # between the two censuses
    count: int = 0  # tensors gained
    bytes: int = 0  # storage and saved-tensor bytes gained (graph nodes estimated for loss_graph)
    nodes: int = 0  # graph nodes gained
    holder: str = ""  # who keeps it, e.g. "`running_loss` in train.py:90 (train_epoch)"; "" if not found

    @property
    def bytes_per_step(self) -> float:
        return self.bytes / self.steps if self.steps else 0.0

    def describe(self) -> str:
        return f"{self.title}: {self.evidence}. Fix: {self.advice}."
