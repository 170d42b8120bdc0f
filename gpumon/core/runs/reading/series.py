"""A downsampled series of (step, value): at most ``MAX_POINTS`` buckets, each with its min, max and last value.

While there is room every point is its own bucket. Past ``MAX_POINTS``
neighbouring buckets merge in pairs and each bucket then covers twice as many
points, so a run of 20 million steps costs the same memory (and the same bytes
in summary.json) as one of 2,000, and a spike survives as a bucket's max.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

MAX_POINTS = 2_000


@dataclass
class Series:
    steps: list[int] = field(default_factory=list)  # each bucket's last step
    values: list[float] = field(default_factory=list)  # each bucket's last value
    lows: list[float] = field(default_factory=list)
    highs: list[float] = field(default_factory=list)
    width: int = 1  # points per bucket
    _fill: int = 0  # points in the last bucket

    def add(self, step: int, value: float) -> None:
        if self.steps and self._fill < self.width:
            self.steps[-1], self.values[-1] = step, value
            if value < self.lows[-1]:
                self.lows[-1] = value
            elif value > self.highs[-1]:
                self.highs[-1] = value
            self._fill += 1
            return
        self.steps.append(step)
        self.values.append(value)
        self.lows.append(value)
        self.highs.append(value)
        self._fill = 1
        if len(self.steps) > MAX_POINTS:
            self._halve()

    def _halve(self) -> None:
        """Merge buckets in pairs; an odd last bucket stays as it is and keeps filling."""
        n = len(self.steps)
        pairs = n // 2
        self.steps = self.steps[1 : 2 * pairs : 2] + self.steps[2 * pairs :]
        self.values = self.values[1 : 2 * pairs : 2] + self.values[2 * pairs :]
        self.lows = [min(self.lows[i], self.lows[i + 1]) for i in range(0, 2 * pairs, 2)] + self.lows[2 * pairs :]
        self.highs = [max(self.highs[i], self.highs[i + 1]) for i in range(0, 2 * pairs, 2)] + self.highs[2 * pairs :]
        if n % 2 == 0:
            self._fill += self.width  # the last pair merged: its bucket holds the previous one's points too
        self.width *= 2

    def __len__(self) -> int:
        return len(self.values)

    @property
    def last(self) -> float | None:
        return self.values[-1] if self.values else None

    def to_state(self) -> dict[str, Any]:
        return {"s": self.steps, "v": self.values, "lo": self.lows, "hi": self.highs, "w": self.width, "f": self._fill}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Series:
        series = cls(list(state["s"]), list(state["v"]), list(state["lo"]), list(state["hi"]), int(state["w"]))
        series._fill = int(state["f"])
        if not (len(series.steps) == len(series.values) == len(series.lows) == len(series.highs)):
            raise ValueError("series columns differ in length")
        return series


@dataclass
class Pace:
    """A rank's steps per second by the wall clock over about its last two minutes, waits and pauses included:
    (time, step) points kept every ``EVERY_S``, the rate from the oldest to the latest step."""

    saved: float | None = None  # the rate a summary recorded, until this fold has its own
    points: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=Pace.POINTS))
    last: tuple[float, int] | None = None

    EVERY_S = 5.0
    POINTS = 25  # x EVERY_S: about two minutes

    def add(self, t: float, step: int) -> None:
        if self.last is not None and step < self.last[1]:
            self.points.clear()  # a restarted rank counts from 1 again
        self.last = (t, step)
        if not self.points or t - self.points[-1][0] >= self.EVERY_S:
            self.points.append((t, step))

    @property
    def rate(self) -> float | None:
        return self.rate_at(None)

    def rate_at(self, now: float | None, since: float | None = None) -> float | None:
        """Steps a second over the window up to the latest step. With ``now`` (a live run) the time since then
        counts too: since its latest step, or since ``since`` where that is later (its events file's last write:
        a step there may not be folded yet). A run with no step for T seconds steps at most once in T."""
        if self.last is not None and self.points:
            (t0, s0), (t1, s1) = self.points[0], self.last
            if t1 > t0 and s1 > s0:  # any span: a short run's wall-clock pace is as true as a long one's
                rate = (s1 - s0) / (t1 - t0)
                quiet = now - max(t1, since if since is not None else t1) if now is not None else 0.0
                if quiet > 0:
                    rate = min(rate, (s1 - s0) / (t1 - t0 + quiet), 1.0 / quiet)
                return rate
        return self.saved

    def to_state(self) -> dict[str, Any]:
        return {"points": [list(p) for p in self.points], "last": list(self.last) if self.last else None}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Pace:
        pace = cls(points=deque(((float(t), int(s)) for t, s in state["points"]), maxlen=cls.POINTS))
        last = state.get("last")
        pace.last = (float(last[0]), int(last[1])) if last else None
        return pace
