"""One run as the Runs view and ``gpumon runs`` show it: ``RunSummary``, folded from the run's telemetry
(``summarise``) or read back from the index's row of an ended run (``to_row``, ``from_row``)."""

from __future__ import annotations

import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.core.doctor.leak_state import LeakState, restore_states
from gpumon.core.runs.reading.progress import ROW_FIELDS, quiet_text
from gpumon.core.runs.reading.rank_rows import RankRow, rank_rows, rows_from
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import END_STATES, RunRecord

if TYPE_CHECKING:  # loaded by whoever folds a live run; an ended run's row needs neither (issue 35)
    from gpumon.core.runs.reading.telemetry import RunTelemetry


@dataclass(frozen=True)
class RunSummary:
    record: RunRecord
    step: int | None
    loss: float | None
    samples_per_s: float | None
    memory: int | None  # bytes: the largest rank's latest CUDA allocated / CPU heap
    memory_kind: str  # "cuda:0", "heap" or ""
    events: int
    skipped: int
    loss_steps: tuple[int, ...]
    loss_values: tuple[float, ...]
    memory_series: dict[int, tuple[tuple[int, ...], tuple[float, ...]]]  # rank -> (steps, bytes)
    exception: str | None  # "Type: message" of the last uncaught exception
    notes: tuple[str, ...] = ()  # the run's notes (telemetry.note), oldest first, the last 20
    leaks: dict[int, LeakState] = field(default_factory=dict)  # rank -> memory trend (the doctor's detector)
    rss: int | None = None  # bytes: the CPU ranks' largest resident set (``memory`` is their live heap)
    alerts: tuple[str, ...] = ()  # the supervisor's alerts (a leak reached, a failure), oldest first, the last 20
    alerts_total: int = 0  # every alert the run raised: a new one is news even once ``alerts`` holds 20
    alert_times: tuple[float, ...] = ()  # each of ``alerts``' event time (0.0 where an older summary had none)
    series: bool = True  # False: read from the index, without the loss and memory series (``RunsMonitor.summary``)
    loss_best: float | None = None  # the lowest loss the series kept (each bucket keeps its minimum); with series
    loss_source: str | None = None  # where ``loss`` comes from: telemetry, hf, lightning, tqdm, backward...
    total_steps: int | None = None  # progress.py: the run's total, where it came from, how far, how long
    total_source: str | None = None  # "plan", or the framework that said it ("tqdm", "hf", "lightning")
    position: int | None = None  # how far, in the total's unit (a tqdm bar's micro-batches, HF's global_step)
    progress: float | None = None  # 0..1
    eta_s: float | None = None  # None once ended
    step_time_s: float | None = None  # seconds per step by the wall clock, the last ~2 min (progress.py's pace)
    median_step_s: float | None = None  # the median step: long waits between steps left out
    quiet_s: float | None = None  # a live run's seconds since its last step, when shown ("no step for ...")
    last_step_t: float | None = None  # the time of its latest step event
    progress_why: str | None = None  # why progress is unknown though a framework counts (a tqdm bar per epoch)
    loss_note: str = ""  # "loss is nan from step 3" (values.py): the chart says it; with series
    data_wait: float | None = None  # the share of a step the most-waiting rank spends in DataLoader (feeding.py)
    warnings: tuple[str, ...] = ()  # input-bound, oversubscribed, a diverging loss: the doctor's words
    slurm: str = ""  # the run's Slurm job in one line (core/slurm/rows.py), read in the feed's thread
    queue: tuple[int | None, str] | None = None  # a queued run: its position and why it waits (core/queue)
    ranks: tuple[RankRow, ...] = ()  # every rank that reported: pid, step, host (rank_rows.py)
    use: dict[str, Any] = field(default_factory=dict)  # mfu, tokens_per_s, flops_per_step... (use.py USE_FIELDS)
    attempt: int = 1  # torchrun's attempt running now (or the last), from 1 (attempts.py)
    restarts: tuple[dict[str, Any], ...] = ()  # each failed attempt: Restart.to_dict(), oldest first
    lanes: tuple[dict[str, Any], ...] = ()  # per rank: score, own_s, wait_s... (lanes.py Lane.to_dict)
    lanes_unknown: str | None = None  # why there are no lanes where ranks step (on a GPU: lanes.py)
    reported: dict[str, Any] | None = None  # the latest ray.train.report of the lowest rank: source, step, metrics
    ledger: dict[str, float] = field(default_factory=dict)  # part -> seconds of the wall time, and "wall" (ledger.py)

    @property
    def leak(self) -> LeakState | None:
        """The rank whose memory warns (growing or leak), fastest first; None when none does."""
        warning = [s for s in self.leaks.values() if s.warning]
        return max(warning, key=lambda s: (s.state == "leak", s.slope)) if warning else None

    @property
    def quiet(self) -> str:
        """ "no step for 1m28s": a running run that stopped stepping, before the stall rule calls it stalled."""
        return quiet_text(self.quiet_s, self.median_step_s) if self.state == "running" else ""

    @property
    def alert_count(self) -> int:
        return max(self.alerts_total, len(self.alerts))

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def state(self) -> str:
        return self.record.state

    @property
    def state_label(self) -> str:
        """ "queued 2" for a queued run (its place in the queue), else the state."""
        if self.queue is not None and self.state == "queued":
            return f"queued {self.queue[0]}" if self.queue[0] else "queued"
        return self.state + self.attempt_words

    @property
    def attempt_words(self) -> str:
        """ " after 1 restart" (ended) or ", attempt 2 of 2" (live) once torchrun started the ranks again, else "":
        a restarted run never reads a plain "finished"."""
        if not self.restarts:
            return ""
        if self.state in END_STATES:
            n = len(self.restarts)
            return f" after {n} restart{'s' if n > 1 else ''}"
        most = self.record.spec.max_restarts
        return f", attempt {self.attempt}" + (f" of {most + 1}" if most else "")


def to_row(summary: RunSummary) -> dict[str, Any]:
    """What the index keeps of an ended run: everything the run list shows, no series."""
    spec = summary.record.spec.to_dict()
    return {
        "spec": {k: v for k, v in spec.items() if v != _SPEC_DEFAULTS.get(k, _SPEC_DEFAULTS)},  # defaults come back
        "status": summary.record.status,
        "step": summary.step,
        "loss": summary.loss,
        "rate": summary.samples_per_s,
        "memory": summary.memory,
        "memory_kind": summary.memory_kind,
        "rss": summary.rss,
        "events": summary.events,
        "skipped": summary.skipped,
        "exception": summary.exception,
        "notes": list(summary.notes),
        "alerts": list(summary.alerts),
        "alerts_total": summary.alert_count,
        "alert_times": list(summary.alert_times),
        "leaks": {f"{rank}:{state.memory}": asdict(state) for rank, state in summary.leaks.items()},
        "loss_source": summary.loss_source,
        **{key: getattr(summary, key) for key in PROGRESS_KEYS},
        "data_wait": summary.data_wait,
        "use": summary.use,
        "warnings": list(summary.warnings),
        "ranks": [row.to_dict() for row in summary.ranks],
        "attempt": summary.attempt,
        "restarts": list(summary.restarts),
        "lanes": list(summary.lanes),
        "lanes_unknown": summary.lanes_unknown,
        "reported": summary.reported,
        "ledger": summary.ledger,
    }


PROGRESS_KEYS = ("total_source", *ROW_FIELDS)  # what the index keeps of progress.py's row fields
_SPEC_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(RunSpec) if f.default is not MISSING and f.name != "cwd"
} | {"args": [], "env": {}, "on_alert": []}


def from_row(path: Path, row: dict[str, Any]) -> RunSummary | None:
    try:
        record = RunRecord(id=path.name, dir=path, spec=RunSpec.from_dict(row["spec"]), status=dict(row["status"]))
        leaks = {rank: state for (rank, _), state in restore_states(row.get("leaks")).items()}
        return RunSummary(
            record=record,
            step=row.get("step"),
            loss=row.get("loss"),
            samples_per_s=row.get("rate"),
            memory=row.get("memory"),
            memory_kind=str(row.get("memory_kind", "")),
            rss=row.get("rss"),
            events=int(row.get("events", 0)),
            skipped=int(row.get("skipped", 0)),
            loss_steps=(),
            loss_values=(),
            memory_series={},
            exception=row.get("exception"),
            notes=tuple(row.get("notes", ())),
            alerts=tuple(row.get("alerts", ())),
            alerts_total=int(row.get("alerts_total") or 0),
            alert_times=tuple(float(t) for t in row.get("alert_times") or ()),
            leaks=leaks,
            series=False,
            loss_source=row.get("loss_source"),
            data_wait=row.get("data_wait"),
            use=dict(row.get("use") or {}),
            warnings=tuple(str(w) for w in row.get("warnings") or ()),
            ranks=rows_from(row.get("ranks")),
            attempt=int(row.get("attempt") or 1),
            restarts=tuple(r for r in row.get("restarts") or () if isinstance(r, dict)),
            lanes=tuple(r for r in row.get("lanes") or () if isinstance(r, dict)),
            lanes_unknown=row.get("lanes_unknown") if isinstance(row.get("lanes_unknown"), str) else None,
            reported=row.get("reported") if isinstance(row.get("reported"), dict) else None,
            ledger={str(k): float(v) for k, v in (row.get("ledger") or {}).items()},
            **_progress(row),
        )
    except (KeyError, TypeError, ValueError):
        return None  # a row of another shape: the run is read from its files instead


def _progress(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row.get(key) for key in PROGRESS_KEYS}


def summarise(record: RunRecord, tele: RunTelemetry, leaks: dict[int, LeakState] | None = None) -> RunSummary:
    from gpumon.core.placement.places import of_record
    from gpumon.core.runs.reading.time_split import time_split

    memory, kind = tele.peak_memory()
    last = tele.exceptions[-1] if tele.exceptions else None
    return RunSummary(
        record=record,
        step=tele.current_step,
        loss=tele.metrics.get("loss"),
        memory=memory,
        memory_kind=kind,
        events=tele.events,
        skipped=tele.skipped,
        loss_steps=tuple(tele.loss.steps),
        loss_values=tuple(tele.loss.values),
        loss_best=min(tele.loss.lows) if tele.loss.lows else None,
        memory_series={r: (tuple(m.used.steps), tuple(m.used.values)) for r, m in sorted(tele.memory.items())},
        exception=f"{last.get('exc_type')}: {last.get('message')}" if last else None,
        notes=tuple(tele.notes[-20:]),
        alerts=tuple(tele.alerts[-20:]),
        alerts_total=tele.alerts_total,
        alert_times=tuple(tele.alert_times[-20:]),
        rss=tele.rss(),
        leaks=dict(leaks or {}),
        loss_source=tele.loss_source,
        loss_note=tele.nonfinite.words(tele.metrics.get("loss")),
        data_wait=tele.feeding.wait_share(),
        warnings=tuple(f"unreadable: {why}" for why in record.unreadable) + run_warnings(tele),
        slurm=of_record(record).line(record),  # a Slurm job's
        ranks=rank_rows(tele),
        attempt=tele.attempts.current,
        restarts=tuple(r.to_dict() for r in tele.attempts.restarts_told()),
        lanes=tuple(lane.to_dict() for lane in tele.lanes.lanes()),
        lanes_unknown=tele.lanes.unknown(),
        reported=tele.reports.latest,
        ledger=run_ledger(record, tele),
        **paced(record, tele, {"time_split": time_split(tele)}),
    )


def run_ledger(record: RunRecord, tele: RunTelemetry) -> dict[str, float]:
    """Where the run's wall time went so far (ledger.py): to its end, or now while it lives."""
    ended = record.status.get("state") in END_STATES or not record.live
    until = record.ended if ended and record.ended is not None else time.time()
    return tele.ledger.seconds(record.started, until, ended, tele.attempts.restarts_told())


def paced(record: RunRecord, tele: RunTelemetry, kept: dict[str, Any]) -> dict[str, Any]:
    """Every figure taken at the run's pace: progress, ETA and quiet (progress_fields), samples/s, and tokens/s,
    achieved FLOP/s and MFU (use.py): all fall together when the run stops stepping (the same pace as SPEED).
    ``kept``: the use fields not paced (time_split)."""
    progress = progress_fields(record, tele)
    step_time = progress["step_time_s"]
    use = {**tele.use.fields(step_time), **kept}
    return {**progress, "samples_per_s": samples_per_s(tele, step_time), "use": use}


def samples_per_s(tele: RunTelemetry, step_time_s: float | None) -> float | None:
    """What the script logs as ``samples_per_s``; else the DataLoader's samples per step at the run's pace (the
    pace SPEED shows); None where either is unknown, never a guess."""
    if tele.samples_per_s is not None:
        return tele.samples_per_s
    per_step = tele.feeding.samples_per_step()
    return per_step / step_time_s if per_step is not None and step_time_s else None


def progress_fields(record: RunRecord, tele: RunTelemetry) -> dict[str, Any]:
    """progress.py's fields; a live run's pace is taken now: it falls as soon as the run stops stepping, never
    stays at the pace of its last steps (the quiet counts from its events files' last write, quiet.py)."""
    from gpumon.core.runs.reading.quiet import written

    ended = record.status.get("state") in END_STATES
    if ended or not record.live:
        return tele.progress.fields(True, tele.current_step)
    return tele.progress.fields(False, tele.current_step, time.time(), written(record.dir))


def run_warnings(tele: RunTelemetry) -> tuple[str, ...]:
    """What slows the run or spoils its loss, short of an alert: the doctor's findings, in its words."""
    from gpumon.core.doctor.allocator_warnings import findings
    from gpumon.core.doctor.divergence import loss_problem
    from gpumon.core.doctor.slow import slow_findings

    found = [f.text for f in slow_findings(tele)] + list(tele.feeding.idle.values())
    found += [text for _, text, _ in findings(tele.allocator)]  # the CUDA allocator's warnings before an OOM
    loss = loss_problem(tele)
    if loss is not None and loss.kind == "diverging":
        found.append(loss.text)
    return tuple(found)


def read_one(record: RunRecord) -> RunSummary:
    """One run's summary from its files (its supervisor's summary.json), without listing the others."""
    from gpumon.core.doctor.leak import LeakWatch
    from gpumon.core.runs.reading.telemetry import RunTelemetry

    tele = RunTelemetry(record.dir)
    tele.update()
    return summarise(record, tele, LeakWatch().update(tele))
