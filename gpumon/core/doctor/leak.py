"""Memory leak detection on each rank's per-iteration memory series (pure Python, no torch).

A streaming ``LeakDetector`` per series (CUDA allocated bytes, or the CPU's live
heap): skip the warm-up, then over a sliding window fit a Theil-Sen line (the
median of pairwise slopes) and call it a trend only when the growth is clear:
rising pairs dominate, the rise is spread over the window (not one jump, nor a
few allocations), and it stands above the window's noise or eats capacity fast.
States climb ok → growing → leak only after consecutive confirmations and fall
back to ok only after a longer quiet stretch, so one noisy step never flips them.
"""

from __future__ import annotations

import os
import random
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from gpumon.core.doctor.causes import name_causes
from gpumon.core.doctor.ceiling import Ceiling, choose
from gpumon.core.doctor.census_settle import Settling
from gpumon.core.doctor.cycles import Cycles
from gpumon.core.doctor.horizon import End, expected_end, judge
from gpumon.core.doctor.leak_state import SEVERITY, STATES, LeakState, restore_states

__all__ = [
    "SEVERITY",
    "STATES",
    "LeakDetector",
    "LeakState",
    "LeakWatch",
    "analyse",
    "analyse_series",
    "restore_states",
]

if TYPE_CHECKING:
    from gpumon.core.runs.reading.telemetry import RunTelemetry


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


@cache  # physical memory does not change while we run; asked once per rank and update
def host_memory() -> int | None:
    """This machine's physical memory in bytes (the capacity of CPU ranks run here)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def analyse_series(
    steps: list[int], values: list[float], capacity_bytes: int | None = None, **options: Any
) -> LeakDetector:
    """Run a detector over a whole series; ``.state`` is the verdict, ``.transitions`` the history."""
    detector = LeakDetector(capacity_bytes, **options)
    for step, value in zip(steps, values, strict=True):
        detector.add(step, value)
    return detector


class LeakWatch:
    """Detectors for every rank of a run, fed every memory sample as the run's events are folded.

    The primary series is CUDA allocated bytes or the CPU heap; RSS (page-granular, noisy) is
    used only when the heap is missing (not glibc). A CUDA rank also gets a detector on the host's
    live heap: ``total_loss += loss`` on a GPU keeps graph nodes on the host and GPU memory flat.
    ``capacity`` maps rank → device bytes; otherwise a CUDA rank's own ``device`` event gives it
    and CPU ranks (and the host heap) use this host's memory. A telemetry read from a run's
    summary brings the verdicts its supervisor recorded (``recorded``); a detector of our own
    takes over from those only once it is past its warm-up.
    """

    def __init__(self, capacity: Mapping[int, int] | None = None, **options: Any) -> None:
        self.capacity = dict(capacity or {})
        self.options = options
        self.detectors: dict[tuple[int, str], LeakDetector] = {}  # (rank, "gpu" | "host" | "")
        self.recorded: dict[tuple[int, str], LeakState] = {}
        self.ends: dict[int, End | None] = {}  # rank -> the step its run is expected to reach (horizon.py)
        self.ceilings: dict[int, Ceiling] = {}  # rank -> the lowest memory limit of its host memory (ceiling.py)
        self._telemetry: RunTelemetry | None = None  # whose ``limits`` (proc_start) give the ceilings
        self._first_heap: dict[int, float] = {}  # rank -> its first host heap sample (RLIMIT_AS's room)
        self.causes: dict[int, str] = {}  # rank -> what its latest census pair named (causes.py), in words
        self._left: dict[int, list[tuple[int, float]]] = {}  # rank -> (census step, heap bytes it left), to set aside
        self._censuses = -1  # how many census events ``causes`` was named from
        self._settling = Settling()  # the creep after a census on a healthy rank (census_settle.py)

    def update(self, telemetry: RunTelemetry, ended: bool = False) -> dict[int, LeakState]:
        """Watch ``telemetry`` from now on; what it folded before arrives as its downsampled series. ``ended``:
        the run has ended (its horizon is then what it would have been: horizon.py)."""
        self._telemetry = telemetry
        if telemetry.watch is not self:
            if not self.detectors:
                for rank, memory in telemetry.memory.items():
                    for step, left in memory.left:  # what censuses left, set aside as the points go by
                        self.looked(rank, step - 1, left)
                    for step, used, heap in memory.points():
                        self.step(rank, memory.device, memory.capacity, step, used, heap)
            if telemetry.watch is None:
                telemetry.watch = self
        self.recorded = restore_states(telemetry.recorded_leaks)
        self.ends = {rank: expected_end(telemetry, rank, ended) for rank in telemetry.memory}
        if len(telemetry.census) != self._censuses:  # a few events, on request: named again only when one comes
            self._censuses = len(telemetry.census)
            self.causes = {rank: found[0].title for rank, found in name_causes(telemetry.census).items() if found}
        return self.states()

    def step(
        self, rank: int, device: str, capacity: int | None, step: int, used: float | None, heap: float | None
    ) -> None:
        """One memory sample of a rank (the telemetry calls this for every ``step`` event)."""
        left = self._left.get(rank)
        heaps = [d for key, d in self.detectors.items() if key[0] == rank and (key[1] == "host" or device == "cpu")]
        while left and left[0][0] < step:  # a census ran since the last sample: what it left is not the script's
            for detector in heaps:
                detector.set_aside(left[0][1])
            if all(d.state.state == "ok" for d in heaps):  # and the creep after it, on a healthy rank
                self._settling.looked(rank, left[0][0])
            left.pop(0)
        cuda = device != "cpu"
        value = heap if cuda else used
        if value is not None and (creep := self._settling.aside(rank, step, value)):
            for detector in heaps:
                detector.set_aside(creep)
        if used is not None:
            own = self.capacity.get(rank, capacity if cuda else self._host(rank, used))
            self._detector((rank, "gpu" if cuda else ""), own).add(step, used)
        if cuda and heap is not None:
            self._detector((rank, "host"), self._host(rank, heap)).add(step, heap)

    def looked(self, rank: int, step: int, left: int) -> None:
        """A census at ``step`` left ``left`` bytes in the rank's heap: set aside from its next sample on (issue 48)."""
        if left:
            self._left.setdefault(rank, []).append((step, left))

    def _host(self, rank: int, heap: float) -> int | None:
        """The ceiling of a rank's host memory: its lowest limit (``proc_start``'s ``limits``), else the host."""
        first = self._first_heap.setdefault(rank, heap)
        limits = self._telemetry.limits.get(rank) if self._telemetry is not None else None
        ceiling = choose(limits, host_memory(), first)
        if ceiling is None:
            self.ceilings.pop(rank, None)
            return None
        self.ceilings[rank] = ceiling
        return ceiling.bytes

    def _detector(self, key: tuple[int, str], capacity: int | None) -> LeakDetector:
        detector = self.detectors.get(key)
        if detector is None:
            detector = self.detectors[key] = LeakDetector(capacity, **self.options)
        elif capacity is not None and detector.capacity_bytes != capacity:
            detector.capacity_bytes = capacity  # the device event or the limits came after the first steps
        return detector

    def series_states(self) -> dict[tuple[int, str], LeakState]:
        """Every detector's state, labelled with the memory it watches, judged against the run's end."""
        out = dict(self.recorded)
        for key, detector in self.detectors.items():
            if key not in out or detector.state.state != "warmup":
                ceiling = self.ceilings.get(key[0]) if key[1] != "gpu" else None
                out[key] = replace(detector.state, memory=key[1], ceiling=ceiling.describe() if ceiling else "")
        for key, state in out.items():
            if key[0] in self.causes:  # a census named what grows on this rank: a leak, whatever the horizon
                out[key] = replace(state, cause=self.causes[key[0]])
        return {key: judge(state, self.ends.get(key[0])) for key, state in sorted(out.items())}

    def states(self) -> dict[int, LeakState]:
        """Per rank the state that matters most: growth on either memory, else the primary series."""
        out: dict[int, LeakState] = {}
        for (rank, _), state in self.series_states().items():  # the primary series comes first
            held = out.get(rank)
            if held is None or (state.grows and (SEVERITY[state.state], state.slope) > _rank(held)):
                out[rank] = state
        return out


def record_states(watch: LeakWatch) -> dict[str, dict[str, Any]]:
    """The watch's verdicts as JSON (summary.json): "rank:memory" -> the LeakState's fields."""
    return {f"{rank}:{memory}": asdict(state) for (rank, memory), state in watch.series_states().items()}


def _rank(state: LeakState) -> tuple[int, float]:
    return (SEVERITY[state.state], state.slope) if state.grows else (-1, 0.0)


def analyse(telemetry: RunTelemetry, capacity: Mapping[int, int] | None = None, **options: Any) -> dict[int, LeakState]:
    """The leak state of every rank of a run, from all its memory samples so far."""
    return LeakWatch(capacity, **options).update(telemetry)
