"""One memory series' leak detector (pure Python, no torch): ``LeakDetector``, fed a sample a step.

Skip the warm-up, then over a sliding window fit a Theil-Sen line (the median of pairwise slopes) and call it a
trend only when the growth is clear: rising pairs dominate, the rise is spread over the window (not one jump, nor a
few allocations), and it stands above the window's noise or eats capacity fast. States climb ok → growing → leak
only after consecutive confirmations and fall back to ok only after a longer quiet stretch, so one noisy step never
flips them. A run's ranks and their series are watched by leak.py's ``LeakWatch``.
"""

from __future__ import annotations

import random
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

from gpumon.core.doctor.cycles import Cycles
from gpumon.core.doctor.leak_state import SEVERITY, LeakState


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _medians(values: list[float], parts: int) -> list[float]:
    size = len(values) / parts
    return [_median(values[round(k * size) : round((k + 1) * size)]) for k in range(parts)]


@dataclass
class LeakDetector:
    """Feed ``add(step, bytes)`` once per sample; it returns the state after that sample.

    Thresholds (all per sample, with steps on the x axis so GPUMON_STEP_EVERY does not matter):
    a trend needs slope ≥ ``min_slope`` B/iter; either strength ≥ ``min_strength`` with growth over
    the window ≥ 3x the noise, or growth ≥ ``large_share`` of capacity per 1000 iterations (and
    strength ≥ 0.2); each quarter of the window above the one before (by a twelfth of the growth
    and by 3 sigma of such a gap); no two jumps carrying most of the rise; and a rise made of jumps (allocations)
    clears ``min_slope`` by ``jump_margin`` sigmas of their count.
    """

    capacity_bytes: int | None = None
    warmup: int = 20  # steps ignored at the start (allocator and caches settling)
    window: int = 50  # samples in the fit
    min_samples: int = 20  # samples after warm-up before the first verdict
    lags: int = 8  # pairs per new sample: ~lags*window/2 pairs in the window
    confirm: int = 5  # consecutive trend samples: ok → growing
    leak_after: int = 20  # consecutive trend samples: → leak
    cooldown: int = 50  # consecutive quiet samples: back to ok
    min_slope: float = 64.0  # B/iter; a list of Python floats grows ~8 B/iter
    min_strength: float = 0.5
    jump_noise: float = 6.0  # a difference this many noise sigmas above the typical one is a jump (an allocation)
    jump_margin: float = 1.5  # growth made of jumps: sigmas of its count's uncertainty above min_slope
    large_share: float = 0.02  # of capacity per 1000 iterations
    urgent: int = 1000  # growing and running out within this many iterations: leak at once
    block: int = 16  # each coarser level sees the median of this many samples of the finer one
    levels: int = 3  # windows of 50, 800, 12800 samples: a leak every epoch is a staircase too
    transitions: list[tuple[int, str]] = field(default_factory=list, init=False)  # (step, new state)

    def __post_init__(self) -> None:
        rng = random.Random(0)  # fixed seed: the same series always gets the same verdict
        # Random lags, not a fixed set: fixed lags alias with periodic patterns (eval every k steps).
        self._rng = rng
        self._pool = [rng.sample(range(1, self.window), min(self.lags, self.window - 1)) for _ in range(61)]
        self._coarse = replace(self, levels=self.levels - 1) if self.levels > 1 else None
        self._own = LeakState()  # this level's state; _state: the worst of all levels
        self.reset()

    def reset(self) -> None:
        self._xs: deque[int] = deque(maxlen=self.window)
        self._ys: deque[float] = deque(maxlen=self.window)
        # _older[i % window]: slopes of the sampled pairs whose older sample is sample i;
        # they leave together when sample i leaves the window.
        self._older: list[list[float]] = [[] for _ in range(self.window)]
        self._sorted: list[float] = []  # all those slopes, kept sorted: the median is an index away
        self._index = -1
        self._rising = self._falling = self._total = 0
        self._run = self._quiet = 0
        self._last_step: int | None = None
        self._offset = 0.0  # bytes set aside (set_aside); a new process (steps went back) has its own memory
        self._block: list[float] = []
        self._cycles = Cycles(min_rise=64 * self.min_slope)
        self._own = self._state = LeakState(samples=self._own.samples)
        if self._coarse is not None:
            self._coarse.reset()

    @property
    def state(self) -> LeakState:
        return self._state

    def set_aside(self, amount: float) -> None:
        """``amount`` bytes of the samples from now on are gpumon's: a census's residue (census_trigger.py)."""
        self._offset += amount

    def add(self, step: int, value: float) -> LeakState:
        before, kept = self._state.state, value - self._offset  # what the script's memory did
        own = self._add(step, kept)  # resets every level when the steps went back
        state = own
        if self._coarse is not None:
            self._block.append(kept)
            if len(self._block) == self.block:
                self._coarse.add(step, _median(self._block))
                self._block.clear()
            coarse = self._coarse.state
            if SEVERITY[coarse.state] > SEVERITY[own.state] and self._coarse.spans(own.cycle):
                state = replace(coarse, current=own.current, samples=own.samples, step=step)
        state = replace(state, current=value) if self._offset else state  # the memory it has, set aside or not
        if state.state != before:
            self.transitions.append((step, state.state))
        self._state = state
        return state

    def spans(self, cycle: int | None) -> bool:
        """Whether this level's trend reads across cycles of ``cycle`` iterations: it sees them itself, or its
        window holds several. A window of two epochs' sawtooth fits one line through both rises."""
        if not cycle or self._own.cycle or len(self._xs) < 2:
            return True
        return self._xs[-1] - self._xs[0] >= 4 * cycle

    def _add(self, step: int, value: float) -> LeakState:
        if self._last_step is not None and step <= self._last_step:
            self.reset()  # a restarted rank counts from 1 again: start over
        self._last_step = step
        seen = self._own.samples + 1
        if step > self.warmup:
            self._push(step, float(value))
            self._cycles.add(step, float(value))
        if len(self._ys) < min(self.min_samples, self.window):
            self._own = LeakState("warmup", current=value, capacity=self.capacity_bytes, samples=seen, step=step)
            return self._own
        slope, strength, noise, trend = self._fit()
        self._run, self._quiet = (self._run + 1, 0) if trend else (0, self._quiet + 1)
        cycles = self._cycles
        if cycles.sawtooth:  # project from the peaks, not from one cycle's rise
            runs_out = cycles.runs_out(self.capacity_bytes, step, value, slope)
        else:
            runs_out = self._runs_out(step, value, slope)
        state = self._next_state(step, runs_out)
        if cycles.sawtooth and runs_out is None and state == "leak":
            state = "growing"  # it grows, and is freed again: a waste, not a run that dies
        since = self._own.since if state == self._own.state and self._own.since is not None else step
        self._own = LeakState(state, slope, strength, noise, value, self.capacity_bytes, runs_out, seen, step, since)
        if cycles.sawtooth:
            along = 0.0 if cycles.flat else cycles.peak_slope
            limit = cycles.limit(self.capacity_bytes)
            self._own = replace(self._own, cycle=cycles.length, peak=cycles.peak, peak_slope=along, cycle_limit=limit)
        return self._own

    def _push(self, step: int, value: float) -> None:
        xs, ys, window = self._xs, self._ys, self.window
        self._index += 1
        index = self._index
        expired = self._older[index % window]  # sample index - window leaves now
        ordered = self._sorted
        for slope in expired:
            self._count(slope, -1)
            del ordered[bisect_left(ordered, slope)]
        expired.clear()
        xs.append(step)
        ys.append(value)
        n = len(ys)
        if n == window:
            lags: Any = self._pool[index % len(self._pool)]
        else:
            lags = range(1, n) if n <= self.lags + 1 else self._rng.sample(range(1, n), self.lags)
        for lag in lags:
            slope = (value - ys[n - 1 - lag]) / (step - xs[n - 1 - lag])
            self._older[(index - lag) % window].append(slope)
            insort(ordered, slope)
            self._count(slope, 1)

    def _count(self, slope: float, delta: int) -> None:
        self._total += delta
        if slope > 0:
            self._rising += delta
        elif slope < 0:
            self._falling += delta

    def _fit(self) -> tuple[float, float, float | None, bool]:
        strength = (self._rising - self._falling) / self._total if self._total else 0.0
        ordered, mid = self._sorted, len(self._sorted) // 2
        slope = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        clear = strength >= self.min_strength
        large = self.capacity_bytes is not None and slope * 1000 >= self.large_share * self.capacity_bytes
        if slope < self.min_slope or not (clear or (large and strength >= 0.2)):
            return slope, strength, None, False
        ys = list(self._ys)
        diffs = [b - a for a, b in pairwise(ys)]
        # Noise of one sample from successive differences: trends and jumps barely move it.
        centre = _median(diffs)
        noise = 1.4826 * _median([abs(d - centre) for d in diffs]) / 1.4142
        growth = slope * (self._xs[-1] - self._xs[0])
        if clear and growth < 3 * noise and not large:
            return slope, strength, noise, False
        # The window in quarters: each quarter's median above the last by a third of its fair share
        # (growth / 4) and, unless capacity is at stake, by 3 sigma of such a gap (1.77 noise / √n):
        # a jump or two (a one-off buffer, a census) or a plateau is no trend.
        quarters = _medians(ys, 4)
        need = growth / 12 if large else max(growth / 12, 5.3 * noise / (len(ys) / 4) ** 0.5)
        if min(b - a for a, b in pairwise(quarters)) < need:
            return slope, strength, noise, False
        # In eighths (medians: one odd sample is no jump), two rises must not carry most of it.
        rises = sorted((b - a for a, b in pairwise(_medians(ys, 8)) if b > a), reverse=True)
        if sum(rises[:2]) > 0.6 * sum(rises):
            return slope, strength, noise, False  # a few allocations, not a leak
        # Growth carried by jumps beyond the noise is a count of allocations: n of them (n of like size: a few
        # big ones count for less) give its rate to ±1/√n. A healthy loop's heap steps up ~1 KiB four to six
        # times in a window (a growing list of floats reallocated, the old block kept in glibc's tcache, a
        # census): 65-90 B/iter for a while, a fraction over the run. The rate must clear min_slope by
        # ``jump_margin`` of that uncertainty; the coarser levels see a slow staircase as a steady rise.
        jumps = [d - centre for d in diffs if d - centre > self.jump_noise * noise]
        if jumps and sum(jumps) >= growth / 2:
            count = sum(jumps) ** 2 / sum(j * j for j in jumps)
            if slope * (1 - self.jump_margin / count**0.5) < self.min_slope:
                return slope, strength, noise, False
        return slope, strength, noise, True

    def _runs_out(self, step: int, value: float, slope: float) -> int | None:
        if self.capacity_bytes is None or slope <= 0:
            return None
        return step + max(0, int((self.capacity_bytes - value) / slope))

    def _next_state(self, step: int, runs_out: int | None) -> str:
        current = self._own.state
        if self._run >= self.leak_after:
            return "leak"
        if self._run >= self.confirm:
            urgent = runs_out is not None and runs_out - step <= self.urgent
            return "leak" if current == "leak" or urgent else "growing"
        if current in ("growing", "leak") and self._quiet < self.cooldown:
            return current
        return "ok"


def analyse_series(
    steps: list[int], values: list[float], capacity_bytes: int | None = None, **options: Any
) -> LeakDetector:
    """Run a detector over a whole series; ``.state`` is the verdict, ``.transitions`` the history."""
    detector = LeakDetector(capacity_bytes, **options)
    for step, value in zip(steps, values, strict=True):
        detector.add(step, value)
    return detector
