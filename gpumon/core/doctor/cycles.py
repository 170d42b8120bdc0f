"""Memory freed at the end of every epoch: a sawtooth, told apart from a leak by its peaks.

A loop that accumulates per epoch (a list of outputs, a loss tensor) and drops it at the epoch's
end grows steadily within each epoch, then falls back. A slope fitted within an epoch would
project "runs out at iteration N" while the peaks stay flat. ``Cycles`` sees the falls, keeps the
peak of each cycle, and projects from the peaks instead.

A fall need not reach the cycle's start: ``running_loss += loss`` reset each epoch while
``epoch_loss = running_loss / n`` keeps the last epoch's graph until the next (BatsResearch/
labelmodels#4) rises for two epochs from the start, then falls by one at each epoch's end. So a
fall is a drop of a good share of the rise that holds for a few samples (one low sample is noise),
and the first cycle, which began wherever the warm-up ended, gives a peak but no length or rise.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

FALL = 0.6  # a drop to below the cycle's low + this share of its rise (by 40% of it) is a fall...
HOLD = 3  # ...when it holds for this many samples
MIN_LENGTH = 16  # samples: shorter rises and falls are batch-to-batch churn
MIN_SHARE = 0.001  # a rise smaller than this share of the peak is the allocator's churn, not a cycle
FLAT = 0.01  # peaks rising less than this share of a cycle's rise per cycle are flat


@dataclass
class Cycles:
    min_rise: float  # bytes: a smaller rise and fall is noise
    low: float | None = None  # the cycle's lowest value so far (where its rise starts)
    high: float = 0.0
    high_step: int = 0
    start: int = 0  # the cycle's first step (the step its fall began, for a whole cycle)
    samples: int = 0  # since the low
    whole: bool = False  # the cycle began at a fall (the first began where the warm-up ended)
    fall: list[float] | None = None  # a drop being confirmed: [its first step, its lowest value, samples]
    peaks: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=8))  # (step, peak)
    rises: deque[float] = field(default_factory=lambda: deque(maxlen=8))
    lengths: deque[int] = field(default_factory=lambda: deque(maxlen=8))

    def add(self, step: int, value: float) -> None:
        if self.low is None:
            self.low = self.high = value
            self.start = self.high_step = step
            return
        rise = self.high - self.low
        big = rise >= max(self.min_rise, MIN_SHARE * self.high)
        if big and self.samples >= MIN_LENGTH and value <= self.low + FALL * rise:
            self._falling(step, value, rise)
            return
        self.fall = None  # it came back up: a dip, not a fall
        if value < self.low:  # still falling (or settling): the rise starts here
            self.low = self.high = value
            self.high_step = step
            self.start = self.start if self.whole else step
            self.samples = 0
            return
        self.samples += 1
        if value > self.high:
            self.high, self.high_step = value, step

    def _falling(self, step: int, value: float, rise: float) -> None:
        if self.fall is None:
            self.fall = [step, value, 1]
            return
        self.fall[1] = min(self.fall[1], value)
        self.fall[2] += 1
        if self.fall[2] < HOLD:
            return
        began, lowest, held = self.fall
        self.peaks.append((self.high_step, self.high))
        if self.whole:
            self.rises.append(rise)
            self.lengths.append(int(began) - self.start)
        self.low, self.high, self.high_step = lowest, value, step
        self.start, self.samples, self.whole, self.fall = int(began), int(held), True, None

    @property
    def sawtooth(self) -> bool:
        """Two cycles seen: memory is freed periodically."""
        return len(self.peaks) >= 2 and bool(self.lengths)

    @property
    def length(self) -> int:
        ordered = sorted(self.lengths)
        return ordered[len(ordered) // 2] if ordered else 0

    @property
    def peak(self) -> float:
        return self.peaks[-1][1] if self.peaks else 0.0

    @property
    def rate(self) -> float:
        """Bytes per iteration within a cycle: the median of each whole cycle's rise over its length."""
        rates = sorted(r / n for r, n in zip(self.rises, self.lengths, strict=True) if n > 0)
        return rates[len(rates) // 2] if rates else 0.0

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

    def limit(self, capacity: int | None) -> int | None:
        """The cycle length at which one cycle's rise would reach ``capacity`` (from this cycle's low)."""
        rate = self.rate
        if capacity is None or rate <= 0 or self.low is None:
            return None
        return max(0, int((capacity - self.low) / rate))

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
