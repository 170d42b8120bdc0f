"""Memory freed at the end of every epoch: a sawtooth, told apart from a leak by its peaks.

A loop that accumulates per epoch (a list of outputs, a loss tensor) and drops it at the epoch's
end grows steadily within each epoch, then falls back. A slope fitted within an epoch would
project "runs out at iteration N" while the peaks stay flat. ``Cycles`` sees the falls, keeps the
peak of each cycle, and projects from the peaks instead.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

FALL = 0.25  # a fall back to within this share of the cycle's rise ends the cycle
MIN_LENGTH = 16  # samples: shorter rises and falls are batch-to-batch churn
MIN_SHARE = 0.001  # a rise smaller than this share of the peak is the allocator's churn, not a cycle
FLAT = 0.01  # peaks rising less than this share of a cycle's rise per cycle are flat


@dataclass
class Cycles:
    min_rise: float  # bytes: a smaller rise and fall is noise
    low: float | None = None  # the cycle's start (its lowest value before the rise)
    high: float = 0.0
    high_step: int = 0
    start: int = 0  # the cycle's first step
    samples: int = 0
    peaks: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=8))  # (step, peak)
    rises: deque[float] = field(default_factory=lambda: deque(maxlen=8))
    lengths: deque[int] = field(default_factory=lambda: deque(maxlen=8))

    def add(self, step: int, value: float) -> None:
        if self.low is None or value < self.low:
            self.low = self.high = value
            self.start = self.high_step = step
            self.samples = 0
            return
        self.samples += 1
        if value > self.high:
            self.high, self.high_step = value, step
        rise = self.high - self.low
        big = rise >= max(self.min_rise, MIN_SHARE * self.high)
        if big and self.samples >= MIN_LENGTH and value <= self.low + FALL * rise:
            self.peaks.append((self.high_step, self.high))
            self.rises.append(rise)
            self.lengths.append(step - self.start)
            self.low = self.high = value
            self.start = self.high_step = step
            self.samples = 0

    @property
    def sawtooth(self) -> bool:
        """Two cycles seen: memory is freed periodically."""
        return len(self.peaks) >= 2

    @property
    def length(self) -> int:
        ordered = sorted(self.lengths)
        return ordered[len(ordered) // 2] if ordered else 0

    @property
    def peak(self) -> float:
        return self.peaks[-1][1] if self.peaks else 0.0

    @property
    def peak_slope(self) -> float:
        """Bytes per iteration along the peaks: the median of pairwise slopes (one odd peak moves it little)."""
        peaks = list(self.peaks)
        slopes = sorted(
            (v1 - v0) / (s1 - s0) for i, (s0, v0) in enumerate(peaks) for s1, v1 in peaks[i + 1 :] if s1 > s0
        )
        return slopes[len(slopes) // 2] if slopes else 0.0

    @property
    def flat(self) -> bool:
        rise = sum(self.rises) / len(self.rises) if self.rises else 0.0
        return self.peak_slope * self.length <= FLAT * rise

    def runs_out(self, capacity: int | None, step: int, value: float, slope: float) -> int | None:
        """Where the peaks reach capacity; with flat peaks, only if this cycle's rise reaches it first."""
        if capacity is None:
            return None
        if not self.flat and self.peak_slope > 0:
            return self.peaks[-1][0] + max(0, int((capacity - self.peak) / self.peak_slope))
        left = self.length - (step - self.start)  # iterations until this cycle's expected fall
        if slope > 0 and value + slope * max(0, left) >= capacity:
            return step + max(0, int((capacity - value) / slope))
        return None
