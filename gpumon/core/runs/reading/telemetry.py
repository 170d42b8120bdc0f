"""What a run's events say, folded into numbers and series the views show.

``RunTelemetry`` keeps, per rank, the memory per iteration, and for the run
the latest step, loss, samples/s, the loss curve, exceptions and notes. Series
are downsampled (``series.py``: min/max/last buckets), so a week-long run costs
the same memory as an hour.

The run's supervisor folds every event as it arrives and saves the result as ``summary.json`` (``save_summary``)
every second or two and at the end. Readers start from that summary and never read the raw events the summary
already covers: an ended run costs one small file whatever its length. Without a summary (an older run, or events
written by hand) the reader folds the raw events itself, once, from where it stopped. A reader that must be as
current as the run's log (the app's Runs table) follows a live run's events on from the summary it started from; a
later summary then only brings the supervisor's leak verdicts (the events hold the rest), until the final one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumon.core.events import EventReader
from gpumon.core.runs.reading.allocator import Allocator
from gpumon.core.runs.reading.attempts import Attempts
from gpumon.core.runs.reading.feeding import Feeding
from gpumon.core.runs.reading.lanes import Lanes
from gpumon.core.runs.reading.ledger import Ledger
from gpumon.core.runs.reading.progress import Progress
from gpumon.core.runs.reading.rank_memory import MemoryWatch, RankMemory, largest_rss, peak_memory
from gpumon.core.runs.reading.reports import Reports
from gpumon.core.runs.reading.series import Pace, Series
from gpumon.core.runs.reading.sources import loss_key, number, rank_of, source_of
from gpumon.core.runs.reading.trials import TUNE_EVENTS, Experiment
from gpumon.core.runs.reading.use import GpuUse
from gpumon.core.runs.record.values import NonFinite, event_number
from gpumon.core.safefs import read_bytes, write_atomic

SUMMARY = "summary.json"
SUMMARY_FORMAT = 1
KEEP = 20  # exceptions and notes kept in a summary (the newest)
KEEP_CENSUS = 10  # census events in a summary: 4 looks a request (census_trigger.py) of 2 ranks, and their pymem


# Parts of the fold that keep their own state, saved in the summary under these names (to_state/from_state each)
PARTS: dict[str, Any] = {
    "feeding": Feeding, "use": GpuUse, "attempts": Attempts, "lanes": Lanes, "reports": Reports, "ledger": Ledger,
    "allocator": Allocator,
}  # fmt: skip


@dataclass
class RunTelemetry:
    run_dir: Path
    step: int | None = None  # the program's own step (telemetry.log)
    optimizer_steps: int | None = None  # counted by the bootstrap's hook
    losses: dict[int, Series] = field(default_factory=dict)  # rank -> loss per step, of its loss source
    loss_sources: dict[int, str] = field(default_factory=dict)  # rank -> the best source that reported a loss
    source_losses: dict[int, dict[str, float]] = field(default_factory=dict)  # rank -> source -> latest loss
    latest: dict[int, dict[str, float]] = field(default_factory=dict)  # rank -> latest value of each metric
    rates: dict[int, float] = field(default_factory=dict)  # rank -> latest samples/s
    memory: dict[int, RankMemory] = field(default_factory=dict)
    pids: dict[int, int] = field(default_factory=dict)  # pid -> rank
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)  # the supervisor's alerts: a leak reached, a failure
    alerts_total: int = 0  # every alert folded, including those a summary no longer keeps
    alert_times: list[float] = field(default_factory=list)  # each kept alert's event time (0.0: not known)
    census: list[dict[str, Any]] = field(default_factory=list)  # the doctor's tensor censuses (few, on request)
    events: int = 0
    rank_steps: dict[int, int] = field(default_factory=dict)  # rank -> its latest optimizer step (not saved)
    tune: Experiment | None = None  # once Tune events arrive (not kept in summaries: Tune has its own reader)
    watch: MemoryWatch | None = None  # fed every memory sample folded here
    use_summary: bool = True  # start from summary.json where there is one
    final: bool = False  # the summary is the run's last: nothing more will come
    recorded_leaks: dict[str, Any] = field(default_factory=dict)  # the supervisor's verdicts (LeakWatch reads them)
    plans: dict[int, int] = field(default_factory=dict)  # rank -> optimizer steps it will take (``plan`` events)
    progress: Progress = field(default_factory=Progress)  # total steps, time per step (progress.py)
    nonfinite: NonFinite = field(default_factory=NonFinite)  # the loss's NaN/inf values (values.py)
    limits: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its memory limits (``proc_start``)
    starts: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> host, started, ppid (``proc_start``)
    feeding: Feeding = field(default_factory=Feeding)  # DataLoader wait, loaders, threads per rank (feeding.py)
    use: GpuUse = field(default_factory=GpuUse)  # FLOPs per step per rank, device names: MFU (use.py)
    attempts: Attempts = field(default_factory=Attempts)  # torchrun's restarts: each attempt's failure (attempts.py)
    lanes: Lanes = field(default_factory=Lanes)  # each rank's own work against its wait in collectives (lanes.py)
    reports: Reports = field(default_factory=Reports)  # each rank's latest ray.train.report (reports.py)
    ledger: Ledger = field(default_factory=Ledger)  # where the wall time went: start-up, saves, evaluation (ledger.py)
    allocator: Allocator = field(default_factory=Allocator)  # CUDA allocator retries, fragmentation, OOM snapshot
    _reader: EventReader | None = None
    _stamp: tuple[int, int] | None = None  # summary.json's (mtime_ns, size) when read
    _following: bool = False  # the events are read on from the summary: a newer one gives its verdicts only

    @property
    def paces(self) -> dict[int, Pace]:
        """rank -> its steps per second by the wall clock (progress.py holds them: the run's one pace)."""
        return self.progress.paces

    @property
    def skipped(self) -> int:
        return self._reader.skipped if self._reader else 0

    @property
    def samples_per_s(self) -> float | None:
        return sum(self.rates.values()) if self.rates else None

    def peak_memory(self) -> tuple[int | None, str]:
        return peak_memory(self.memory)

    def rss(self) -> int | None:
        return largest_rss(self.memory)

    def update(self, events: bool = True) -> int:
        """Read what is new (a newer summary, then the events after it); returns how many arrived.

        ``events=False``: the summary alone, for readers that let the supervisor fold (``gpumon runs``): up to
        its save interval behind the run. Once events are read, they are followed from where the fold stopped.
        """
        if self.final:
            return 0
        changed = self._load_summary() if self.use_summary else 0
        if self.final or (not events and self._stamp is not None):
            return changed
        if self._reader is None:
            self._reader = EventReader(self.run_dir)
        self._following = True
        new = 0
        for event in self._reader.each():  # chunk by chunk: a run never summarised costs bounded memory
            self.apply(event)
            new += 1
        return changed + new

    def _load_summary(self) -> int:
        path = self.run_dir / SUMMARY
        try:
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return 0
            state = json.loads(read_bytes(path))  # a FIFO planted there is refused, never waited on
        except (OSError, ValueError):
            return 0
        if not isinstance(state, dict) or state.get("format") != SUMMARY_FORMAT:
            return 0
        if self._following and not state.get("final"):
            return self._verdicts(state, stamp)
        try:
            self._restore(state)
        except (KeyError, TypeError, ValueError):
            return 0  # a summary we cannot read: the events still can be
        self._stamp = stamp
        return max(1, self.events)

    def _verdicts(self, state: dict[str, Any], stamp: tuple[int, int]) -> int:
        """A newer summary of a run whose events this fold follows: they hold all it says but the supervisor's
        leak verdicts. Restoring it would take the fold back to where it stopped and read its events again."""
        self._stamp = stamp
        leaks = state.get("leaks")
        if not isinstance(leaks, dict) or leaks == self.recorded_leaks:
            return 0
        self.recorded_leaks = dict(leaks)
        return 1

    def to_state(self, final: bool = False) -> dict[str, Any]:
        """Everything the views and the doctor need, and where in each event file it stops."""
        lowest = min(self.losses) if self.losses else None
        return {
            "format": SUMMARY_FORMAT,
            "final": final,
            "offsets": self._reader.offsets() if self._reader else {},
            "events": self.events,
            "skipped": self.skipped,
            "step": self.step,
            "optimizer_steps": self.optimizer_steps,
            "loss_rank": lowest,
            "loss": self.losses[lowest].to_state() if lowest is not None else None,
            "loss_sources": {str(r): s for r, s in self.loss_sources.items()},
            "source_losses": {str(r): v for r, v in self.source_losses.items()},
            "latest": {str(r): v for r, v in self.latest.items()},
            "rates": {str(r): v for r, v in self.rates.items()},
            "memory": {str(r): m.to_state() for r, m in self.memory.items()},
            "pids": {str(p): r for p, r in self.pids.items()},
            "exceptions": self.exceptions[-KEEP:],
            "notes": self.notes[-KEEP:],
            "alerts": self.alerts[-KEEP:],
            "alerts_total": self.alerts_total,
            "alert_times": self.alert_times[-KEEP:],
            "census": self.census[-KEEP_CENSUS:],
            "leaks": self.recorded_leaks,
            "plans": {str(r): v for r, v in self.plans.items()},
            "progress": self.progress.to_state(),
            "nonfinite": self.nonfinite.to_state(),
            "limits": {str(r): v for r, v in self.limits.items()},
            "starts": {str(r): v for r, v in self.starts.items()},
            **{name: getattr(self, name).to_state() for name in PARTS},
        }

    def _restore(self, state: dict[str, Any]) -> None:
        memory = {int(r): RankMemory.from_state(m) for r, m in state["memory"].items()}
        loss_rank = state.get("loss_rank")
        self.losses = {int(loss_rank): Series.from_state(state["loss"])} if loss_rank is not None else {}
        self.memory = memory
        self.loss_sources = {int(r): str(s) for r, s in (state.get("loss_sources") or {}).items()}
        self.source_losses = {int(r): dict(v) for r, v in (state.get("source_losses") or {}).items()}
        self.step, self.optimizer_steps = state.get("step"), state.get("optimizer_steps")
        self.latest = {int(r): dict(v) for r, v in state["latest"].items()}
        self.rates = {int(r): float(v) for r, v in state["rates"].items()}
        self.pids = {int(p): int(r) for p, r in state["pids"].items()}
        self.exceptions, self.notes = list(state["exceptions"]), list(state["notes"])
        self.alerts = list(state.get("alerts") or ())
        self.alerts_total = max(int(state.get("alerts_total") or 0), len(self.alerts))
        times = [float(t) for t in state.get("alert_times") or ()]  # an older summary has none: 0.0 each
        self.alert_times = ([0.0] * len(self.alerts) + times)[len(times) :] if self.alerts else []
        self.census = list(state["census"])
        self.events = int(state["events"])
        self.recorded_leaks = dict(state.get("leaks") or {})
        self.plans = {int(r): int(v) for r, v in (state.get("plans") or {}).items()}
        self.progress = Progress.from_state(state.get("progress"))
        if not self.progress.paces:  # a summary from before the pace moved into progress: its rates
            self.progress.paces = {int(r): Pace(saved=float(v)) for r, v in (state.get("pace") or {}).items()}
        self.nonfinite = NonFinite.from_state(state.get("nonfinite"))
        self.limits = {int(r): dict(v) for r, v in (state.get("limits") or {}).items() if isinstance(v, dict)}
        self.starts = {int(r): dict(v) for r, v in (state.get("starts") or {}).items() if isinstance(v, dict)}
        for name, part in PARTS.items():  # an older summary without a part: that part starts empty
            setattr(self, name, part.from_state(state.get(name)))
        self.final = bool(state.get("final"))
        self._reader = EventReader(self.run_dir)
        self._reader.resume(state.get("offsets") or {}, int(state.get("skipped", 0)))

    def apply(self, event: dict[str, Any]) -> None:
        self.events += 1
        kind = event["type"]
        rank = _rank(event)
        for part in (self.progress, self.attempts, self.reports, self.ledger, self.allocator):  # the kinds it knows
            part.fold(kind, event, rank)
        if kind in ("flops", "device", "step"):
            self.use.fold(kind, event, rank)
        if kind == "metrics":
            self._metrics(event, rank)
        elif kind == "step":
            self._step(event, rank)
        elif kind == "proc_start" and isinstance(event.get("pid"), int):
            self.pids[event["pid"]] = rank
            self.starts[rank] = {k: v for k in ("host", "started", "ppid") if isinstance(v := event.get(k), str | int)}
            if isinstance(event.get("limits"), dict):
                self.limits[rank] = event["limits"]
        elif kind == "exception":
            self.exceptions.append(event)
        elif kind == "alert" and isinstance(event.get("text"), str):
            self.alerts.append(event["text"])
            self.alerts_total += 1
            self.alert_times.append(float(event["t"]) if isinstance(event.get("t"), int | float) else 0.0)
        elif kind == "note" and isinstance(event.get("text"), str):
            self.notes.append(event["text"])
        elif kind == "device" and isinstance(event.get("total"), int):
            self.memory.setdefault(rank, RankMemory(device=str(event.get("dev", "cuda")))).capacity = event["total"]
        elif kind in ("census", "pymem"):  # the rank's looks at its memory: tensors, then Python's
            self.census.append(event)
        elif kind == "dataloader":
            self.feeding.loader(rank, event)
        elif kind == "threads":
            self.feeding.threads(rank, event)
        elif kind in ("gpu_idle", "gpu_busy"):
            self.feeding.gpu(kind, event)
        elif kind == "stall":  # the supervisor saw a rank stopped: that time is no data wait
            self.feeding.stall(event)
        elif kind == "gpu_use":
            # the supervisor writes it: the rank is a field, not the source
            self.feeding.gpu_use(event["rank"] if type(event.get("rank")) is int else rank, event)
        elif kind == "plan" and type(event.get("steps")) is int and event["steps"] > 0:
            self.plans[rank] = event["steps"]
        elif kind in TUNE_EVENTS:
            self.tune = self.tune if self.tune is not None else Experiment()
            self.tune.apply(event)

    def _metrics(self, event: dict[str, Any], rank: int) -> None:
        metrics = event.get("metrics")
        if not isinstance(metrics, dict):
            return
        source = source_of(event)
        step = event.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            step = None
        if step is not None and source == "telemetry":  # a framework's step is not the program's own
            self.step = max(self.step or 0, step)
        rate = number(metrics.get("samples_per_s"))
        if rate is not None:
            self.rates[rank] = rate
        latest = self.latest.setdefault(rank, {})
        for key, value in metrics.items():
            if (known := number(value)) is not None and key != "loss":
                latest[key] = known  # NaN and infinities are values too
        key = loss_key(metrics)
        loss = number(metrics.get(key)) if key is not None else None
        if loss is not None:
            self._loss(rank, source, step if step is not None else self.rank_steps.get(rank), loss)

    def _loss(self, rank: int, source: str, step: int | None, loss: float) -> None:
        """The rank's loss from ``source``: shown (value and curve) while no better source reported one."""
        self.source_losses.setdefault(rank, {})[source] = loss
        chosen = self.loss_sources.get(rank)
        if chosen is not None and rank_of(source) > rank_of(chosen):
            return
        if chosen != source:  # a better source: the curve is its own from here
            self.loss_sources[rank] = source
            self.losses.pop(rank, None)
        self.latest.setdefault(rank, {})["loss"] = loss
        if rank == min(self.loss_sources):  # the run's loss: where it turned NaN or infinite (values.py)
            self.nonfinite.add(step, loss)
        if step is not None and math.isfinite(loss):  # the curve: finite points only
            self.losses.setdefault(rank, Series()).add(step, loss)

    @property
    def loss_source(self) -> str | None:
        """Where the shown loss (``metrics["loss"]``) comes from: the lowest rank that reports a loss."""
        return self.loss_sources[min(self.loss_sources)] if self.loss_sources else None

    @property
    def loss(self) -> Series:
        """The run's loss curve: the lowest rank's (ranks may report in any order)."""
        return self.losses[min(self.losses)] if self.losses else Series()

    @property
    def metrics(self) -> dict[str, float]:
        """Each metric's latest value from the lowest rank that reports it.

        Per metric, not per rank: a pipeline's loss comes from its last stage while rank 0 reports
        only throughput, and the run's LOSS must still be the one its chart draws.
        """
        merged: dict[str, float] = {}
        for rank in sorted(self.latest, reverse=True):
            merged.update(self.latest[rank])
        return merged

    def _step(self, event: dict[str, Any], rank: int) -> None:
        step = event.get("step")
        if not isinstance(step, int):
            return
        mem = self.memory.setdefault(rank, RankMemory())
        dev = str(event.get("dev", "cpu"))
        mem.device = dev
        used = event_number(event.get("alloc") if dev != "cpu" else event.get("heap"))
        second = event_number(event.get("reserved") if dev != "cpu" else event.get("rss"))
        heap = event_number(event.get("heap")) if dev != "cpu" else None
        for series, value in ((mem.used, used), (mem.reserved, second), (mem.heap, heap)):
            if value is not None:
                series.add(step, value)
        peak = event.get("peak")
        if isinstance(peak, int):
            mem.peak = peak
        if type(left := event.get("census_left")) is int:  # a census since the last sample left it in the heap
            mem.census_left(step, left)
            if self.watch is not None:
                self.watch.looked(rank, step - 1, left)
        if self.watch is not None:
            self.watch.step(rank, dev, mem.capacity, step, used if used is not None else second, heap)
        self.feeding.step(rank, event, step)
        self.lanes.step(rank, event, step)
        for key in ("lr", "grad_norm", "loss_scale"):  # read from the optimizer, clip_grad_norm_, the GradScaler
            if (value := number(event.get(key))) is not None:
                self.latest.setdefault(rank, {})[key] = value
        self.rank_steps[rank] = step
        if self.optimizer_steps is None or step > self.optimizer_steps:
            self.optimizer_steps = step

    def rank_step(self, rank: int) -> int | None:
        """The latest step a rank's memory was sampled at."""
        memory = self.memory.get(rank)
        if memory is None:
            return None
        series = memory.used if len(memory.used) else memory.reserved
        return series.steps[-1] if series.steps else None

    @property
    def current_step(self) -> int | None:
        """The job's step as its user sees it: the program's own (``telemetry.log(step=)``), else the job's
        count where it differs from this process's (a resumed run: the plan's ``done``, HF's or Lightning's
        ``global_step``, a step-counting tqdm bar's position, progress.py), else the optimizer steps counted."""
        if self.step is not None:
            return self.step
        job = self.progress.job_step()
        return job if job is not None else self.optimizer_steps


def save_summary(telemetry: RunTelemetry, final: bool = False) -> None:
    """Write summary.json atomically (a reader sees the old one or the new one, never half)."""
    path = telemetry.run_dir / SUMMARY
    data = json.dumps(telemetry.to_state(final), separators=(",", ":"), default=str)  # NaN loss stays NaN
    write_atomic(path, data.encode())
    telemetry.final = telemetry.final or final


def _rank(event: dict[str, Any]) -> int:
    src = str(event.get("src", ""))
    digits = src[4:] if src.startswith("rank") else ""
    return int(digits) if digits.isdigit() else 0
