"""A capped series of (step, value): past ``MAX_POINTS`` every other point is dropped."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_POINTS = 20_000


@dataclass
class Series:
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    stride: int = 1  # keep every stride-th point once capped
    _seen: int = 0

    def add(self, step: int, value: float) -> None:
        self._seen += 1
        if self._seen % self.stride:
            return
        self.steps.append(step)
        self.values.append(value)
        if len(self.values) > MAX_POINTS:
            self.steps = self.steps[::2]
            self.values = self.values[::2]
            self.stride *= 2

    def __len__(self) -> int:
        return len(self.values)

    @property
    def last(self) -> float | None:
        return self.values[-1] if self.values else None
