"""Memory leak detection on each rank's per-iteration memory series (pure Python, no torch).

``LeakWatch`` keeps a streaming ``LeakDetector`` (leak_detector.py: the statistics of one series) per rank and
series (CUDA allocated bytes, or the CPU's live heap, and a CUDA rank's host heap), gives each its capacity (the
device's, or the rank's host memory ceiling), sets aside what a census left, and judges each verdict against the
run's end and the causes a census named.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, replace
from functools import cache
from typing import TYPE_CHECKING, Any

from gpumon.core.doctor.causes import name_causes
from gpumon.core.doctor.ceiling import Ceiling, choose
from gpumon.core.doctor.census_settle import Settling
from gpumon.core.doctor.horizon import End, expected_end, judge
from gpumon.core.doctor.leak_detector import LeakDetector, analyse_series
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


@cache  # physical memory does not change while we run; asked once per rank and update
def host_memory() -> int | None:
    """This machine's physical memory in bytes (the capacity of CPU ranks run here)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


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
