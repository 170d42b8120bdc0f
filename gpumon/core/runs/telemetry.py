"""What a run's events say, folded into numbers and series the views show.

``RunTelemetry`` tails one run's event files and keeps, per rank, the memory
per iteration, and for the run the latest step, loss, samples/s, the loss
curve, exceptions and notes. Series are capped: past ``MAX_POINTS`` every
other point is dropped, so a week-long run costs the same memory as an hour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumon.core.events import EventReader
from gpumon.core.runs.series import MAX_POINTS, Series
from gpumon.core.runs.trials import TUNE_EVENTS, Experiment

__all__ = ["MAX_POINTS", "RankMemory", "RunTelemetry", "Series", "tail_lines"]


@dataclass
class RankMemory:
    """Per-iteration memory of one rank: CUDA allocated bytes, or the live heap on a CPU."""

    device: str = "cpu"
    used: Series = field(default_factory=Series)  # CUDA allocated / CPU heap
    reserved: Series = field(default_factory=Series)  # CUDA reserved / CPU RSS
    heap: Series = field(default_factory=Series)  # CUDA ranks: the host's live heap (autograd graphs live there)
    peak: int | None = None
    capacity: int | None = None  # CUDA ranks: the device's total bytes (its ``device`` event)


@dataclass
class RunTelemetry:
    run_dir: Path
    step: int | None = None  # the program's own step (telemetry.log)
    optimizer_steps: int | None = None  # counted by the bootstrap's hook
    losses: dict[int, Series] = field(default_factory=dict)  # rank -> loss per step
    latest: dict[int, dict[str, float]] = field(default_factory=dict)  # rank -> latest value of each metric
    rates: dict[int, float] = field(default_factory=dict)  # rank -> latest samples/s
    memory: dict[int, RankMemory] = field(default_factory=dict)
    pids: dict[int, int] = field(default_factory=dict)  # pid -> rank
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    census: list[dict[str, Any]] = field(default_factory=list)  # the doctor's tensor censuses (few, on request)
    events: int = 0
    tune: Experiment | None = None  # once Tune events arrive
    _reader: EventReader | None = None

    @property
    def skipped(self) -> int:
        return self._reader.skipped if self._reader else 0

    @property
    def samples_per_s(self) -> float | None:
        return sum(self.rates.values()) if self.rates else None

    def peak_memory(self) -> tuple[int | None, str]:
        """The largest latest per-rank memory and what it measures ("cuda" or "heap")."""
        latest = [(m.used.last, m.device) for m in self.memory.values() if m.used.last is not None]
        if not latest:
            return None, ""
        value, device = max(latest, key=lambda x: x[0] or 0)
        return int(value or 0), "heap" if device == "cpu" else device

    def update(self) -> int:
        """Read what is new; returns how many events arrived."""
        if self._reader is None:
            self._reader = EventReader(self.run_dir)
        new = self._reader.poll()
        for event in new:
            self.apply(event)
        return len(new)

    def apply(self, event: dict[str, Any]) -> None:
        self.events += 1
        kind = event["type"]
        rank = _rank(event)
        if kind == "metrics":
            self._metrics(event, rank)
        elif kind == "step":
            self._step(event, rank)
        elif kind == "proc_start" and isinstance(event.get("pid"), int):
            self.pids[event["pid"]] = rank
        elif kind == "exception":
            self.exceptions.append(event)
        elif kind == "note" and isinstance(event.get("text"), str):
            self.notes.append(event["text"])
        elif kind == "device" and isinstance(event.get("total"), int):
            self.memory.setdefault(rank, RankMemory(device=str(event.get("dev", "cuda")))).capacity = event["total"]
        elif kind == "census":
            self.census.append(event)
        elif kind in TUNE_EVENTS:
            if self.tune is None:
                self.tune = Experiment()
            self.tune.apply(event)

    def _metrics(self, event: dict[str, Any], rank: int) -> None:
        metrics = event.get("metrics")
        if not isinstance(metrics, dict):
            return
        step = event.get("step")
        if isinstance(step, int):
            self.step = max(self.step or 0, step)
        rate = metrics.get("samples_per_s")
        if isinstance(rate, int | float):
            self.rates[rank] = float(rate)
        latest = self.latest.setdefault(rank, {})
        for key, value in metrics.items():
            if isinstance(value, int | float):
                latest[key] = float(value)
        loss = metrics.get("loss")
        if isinstance(loss, int | float) and isinstance(step, int):
            self.losses.setdefault(rank, Series()).add(step, float(loss))

    @property
    def loss(self) -> Series:
        """The run's loss curve: the lowest rank's (ranks may report in any order)."""
        return self.losses[min(self.losses)] if self.losses else Series()

    @property
    def metrics(self) -> dict[str, float]:
        """The latest metrics of the lowest reporting rank."""
        return self.latest[min(self.latest)] if self.latest else {}

    def _step(self, event: dict[str, Any], rank: int) -> None:
        step = event.get("step")
        if not isinstance(step, int):
            return
        mem = self.memory.setdefault(rank, RankMemory())
        dev = str(event.get("dev", "cpu"))
        mem.device = dev
        used = event.get("alloc") if dev != "cpu" else event.get("heap")
        second = event.get("reserved") if dev != "cpu" else event.get("rss")
        if isinstance(used, int | float):
            mem.used.add(step, float(used))
        if isinstance(second, int | float):
            mem.reserved.add(step, float(second))
        heap = event.get("heap")
        if dev != "cpu" and isinstance(heap, int | float):
            mem.heap.add(step, float(heap))
        peak = event.get("peak")
        if isinstance(peak, int):
            mem.peak = peak
        if self.optimizer_steps is None or step > self.optimizer_steps:
            self.optimizer_steps = step

    @property
    def current_step(self) -> int | None:
        return self.step if self.step is not None else self.optimizer_steps


def _rank(event: dict[str, Any]) -> int:
    src = str(event.get("src", ""))
    digits = src[4:] if src.startswith("rank") else ""
    return int(digits) if digits.isdigit() else 0


def tail_lines(path: Path, lines: int = 200, max_bytes: int = 256 * 1024) -> list[str]:
    """The last ``lines`` lines of a log without reading all of it."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    text = data.decode(errors="replace").replace("\r", "")
    out = text.split("\n")
    if size > max_bytes:
        out = out[1:]  # the first line was cut
    if out and out[-1] == "":
        out.pop()
    return out[-lines:]
