"""Everything the Runs view and ``gpumon runs`` show, at a cost that grows with neither run length nor run count.

Ended runs come from the index (``index.py``), read once per monitor; a run
that ended without a row (an older run) is read once from its files and gets
one. Live runs have their status re-read and their summary.json (the
supervisor's fold of their events) reloaded when it changed; a run without a
summary has its new events folded here, from where the last read stopped. The
run list itself is listed again only when the runs folder changes. Safe to
call from a worker thread: the views get immutable ``RunSummary`` objects.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from gpumon.core.doctor.leak import LeakState, LeakWatch, restore_states
from gpumon.core.runs.reading.rank_rows import RankRow, rank_rows, rows_from
from gpumon.core.runs.reading.telemetry import RunTelemetry, save_summary
from gpumon.core.runs.record.index import RunIndex
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import END_STATES, RunRecord, RunStore


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
    alerts: tuple[str, ...] = ()  # the supervisor's alerts (a leak reached, a failure), oldest first
    series: bool = True  # False: read from the index, without the loss and memory series (``RunsMonitor.summary``)
    loss_best: float | None = None  # the lowest loss the series kept (each bucket keeps its minimum); with series
    loss_source: str | None = None  # where ``loss`` comes from: telemetry, hf, lightning, tqdm, backward...
    total_steps: int | None = None  # progress.py: the run's total, where it came from, how far, how long
    total_source: str | None = None  # "plan", or the framework that said it ("tqdm", "hf", "lightning")
    progress: float | None = None  # 0..1
    eta_s: float | None = None  # None once ended
    step_time_s: float | None = None  # seconds per step by the wall clock, the last ~2 min (progress.py's pace)
    median_step_s: float | None = None  # the median step: long waits between steps left out
    loss_note: str = ""  # "loss is nan from step 3" (values.py): the chart says it; with series
    data_wait: float | None = None  # the share of a step the most-waiting rank spends in DataLoader (feeding.py)
    warnings: tuple[str, ...] = ()  # input-bound, oversubscribed, a diverging loss: the doctor's words
    slurm: str = ""  # the run's Slurm job in one line (core/slurm/rows.py), read in the feed's thread
    queue: tuple[int | None, str] | None = None  # a queued run: its position and why it waits (core/queue)
    ranks: tuple[RankRow, ...] = ()  # every rank that reported: pid, step, host (rank_rows.py)
    use: dict[str, Any] = field(default_factory=dict)  # mfu, tokens_per_s, flops_per_step... (use.py USE_FIELDS)

    @property
    def leak(self) -> LeakState | None:
        """The rank whose memory warns (growing or leak), fastest first; None when none does."""
        warning = [s for s in self.leaks.values() if s.warning]
        return max(warning, key=lambda s: (s.state == "leak", s.slope)) if warning else None

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
        return self.state


class RunsMonitor:
    """``refresh()`` once a second; ``summary(run_id)`` for one run with its series (the detail)."""

    def __init__(self, store: RunStore | None = None, adopt: bool = False) -> None:
        """``adopt``: give a run whose supervisor died a new one (not in --readonly), and write the end of
        a run whose supervisor died with its processes."""
        self.store = store or RunStore()
        self.adopt = adopt
        self._adopted: set[str] = set()
        self.index = RunIndex(self.store.root)
        self._summaries: dict[str, RunSummary] = {}
        self._live: dict[str, tuple[RunRecord, RunTelemetry, LeakWatch]] = {}  # runs not ended yet
        self._indexed = False
        self._listed: int | None = None  # the runs folder's mtime when last listed
        self._unread: set[str] = set()  # folders listed before their files were written: tried again each refresh
        self._sorted: list[RunSummary] | None = None
        self._detail: RunSummary | None = None  # the last ended run asked for with its series
        self._queue_checked = -1e9  # when a keeper for queued runs was last made sure of

    def refresh(self) -> list[RunSummary]:
        """All runs, oldest first."""
        if not self._indexed:
            self._indexed = True
            for run_id, row in self.index.rows().items():
                summary = from_row(self.store.runs_dir / run_id, row)
                if summary is not None:
                    self._summaries[run_id] = summary
        self._list()
        for run_id in list(self._live):
            self._follow(run_id)
        self._queue_places()
        if self._sorted is None:
            self._sorted = sorted(self._summaries.values(), key=lambda s: (s.record.created, s.id))
        return self._sorted

    def _list(self) -> None:
        """New run folders are opened, vanished ones dropped; nothing is listed while the folder is unchanged."""
        try:
            stamp = self.store.runs_dir.stat().st_mtime_ns
            names = None if stamp == self._listed else {p.name for p in self.store.runs_dir.iterdir()}
        except OSError:
            return
        if names is not None:
            self._listed = stamp
            for gone in set(self._summaries) - names:
                self._summaries.pop(gone, None)
                self._live.pop(gone, None)
                self._sorted = None
            self._unread = (self._unread & names) | (names - set(self._summaries) - set(self._live))
        # A folder the launcher has just made holds no spec yet, and the folder's mtime will not change
        # again when it does: such names are read again at each refresh until they load.
        for name in sorted(self._unread):
            record = self.store.load(self.store.runs_dir / name)
            if record is not None:
                self._unread.discard(name)
                self._live[name] = (record, RunTelemetry(record.dir), LeakWatch())
                self._follow(name, fresh=True)

    def _follow(self, run_id: str, fresh: bool = False) -> None:
        record, tele, watch = self._live[run_id]
        if not fresh:
            record = record.reread()
        ended = record.status.get("state") in END_STATES
        if record.status.get("state") == "queued":  # waits for the queue's keeper: no supervisor yet
            if self.adopt:
                self._keep_queue(record)
            supervised = False
        else:
            supervised = not ended and record.supervisor_alive()  # asked once: each answer costs psutil calls
        if self.adopt and not ended and not supervised and record.status.get("state") != "queued":
            record = self._take_over(record)
            ended = record.status.get("state") in END_STATES
        # A supervised run: its supervisor folds the events; reading its summary is enough (and cheap).
        changed = tele.update(events=not tele.final and not supervised)
        old = self._summaries.get(run_id)
        if changed or fresh or old is None or old.record.status != record.status:
            summary = summarise(record, tele, watch.update(tele))
            self._summaries[run_id] = summary
            self._sorted = None
        elif record.status.get("state") == "stalled":  # nothing new, but its pace falls as time passes
            summary = replace(old, **progress_fields(old.record, tele))
            self._summaries[run_id], record = summary, old.record
            self._sorted = None
        else:
            summary, record = old, old.record  # nothing new: the same objects, so the views skip it
        self._live[run_id] = (record, tele, watch)
        if ended:  # read for the last time: from now on the index has it
            if not tele.final:  # no summary (copied from elsewhere, an older gpumon): the next reader pays nothing
                with contextlib.suppress(OSError):
                    save_summary(tele, final=True)
            del self._live[run_id]
            self._summaries[run_id] = replace(summary, loss_steps=(), loss_values=(), memory_series={}, series=False)
            with contextlib.suppress(sqlite3.Error, OSError):  # listing works without the index
                self.index.put([(run_id, record.created, to_row(summary))])

    def _queue_places(self) -> None:
        """Each queued run's position and reason, from its place (the queue: the keeper's plan, read once)."""
        queued = [run_id for run_id in self._live if self._summaries.get(run_id, None) is not None]
        queued = [run_id for run_id in queued if self._summaries[run_id].record.status.get("state") == "queued"]
        if not queued:
            return
        from gpumon.core.placement.base import Placement
        from gpumon.core.placement.places import of_record

        by_place: dict[Placement, list[str]] = {}
        for run_id in queued:
            by_place.setdefault(of_record(self._summaries[run_id].record), []).append(run_id)
        for place, run_ids in by_place.items():  # the queue reads its plan once, whatever the number of runs
            for run_id, where in place.waiting(self.store.root, run_ids).items():
                if self._summaries[run_id].queue != where:
                    self._summaries[run_id] = replace(self._summaries[run_id], queue=where)
                    self._sorted = None

    def _keep_queue(self, record: RunRecord) -> None:
        """Queued runs and no keeper (it was killed): its place starts one, at most every few seconds."""
        import time

        if time.monotonic() - self._queue_checked < 5.0:
            return
        self._queue_checked = time.monotonic()
        from gpumon.core.placement.places import of_record

        with contextlib.suppress(OSError):
            of_record(record).wake(self.store.root)

    def _take_over(self, record: RunRecord) -> RunRecord:
        from gpumon.core.placement.places import of_record
        from gpumon.core.runs.supervision.launcher import adopt, record_end

        # The supervisor may have written the end and exited since status.json was read: read it again,
        # or a run that just finished would be taken for one whose supervisor died.
        record = record.reread()
        if record.status.get("state") in END_STATES:
            return record
        state = record.state
        with contextlib.suppress(OSError):  # another user's run: shown as it is
            if state == "unsupervised" and record.id not in self._adopted:
                self._adopted.add(record.id)
                adopt(record)
            elif state == "lost" and of_record(record).end_lost(record):  # its place's end (a job's: Slurm's)
                return record.reread()
            elif state == "lost":
                record_end(record, "lost", "its supervisor died, and its processes with it")
                return record.reread()
            elif state in END_STATES:  # it ended after its supervisor died: its runner wrote the exit
                record_end(record, state, "its supervisor died; the exit is its runner's record")
                return record.reread()
        return record

    def recent(self, ended: int) -> list[RunSummary]:
        """After ``refresh()``: the runs not ended yet and the newest ``ended`` ended ones, oldest first.
        Costs what it returns, not the state dir's size: the sorted list is walked from its newest end."""
        runs = self._sorted if self._sorted is not None else self.refresh()
        keep = [self._summaries[run_id] for run_id in self._live if run_id in self._summaries]
        newest: list[RunSummary] = []
        for summary in reversed(runs):
            if len(newest) >= ended:
                break
            if summary.id not in self._live:
                newest.append(summary)
        return sorted(keep + newest, key=lambda s: (s.record.created, s.id))

    def summary(self, run_id: str) -> RunSummary | None:
        """One run with its downsampled series (what the run's detail draws)."""
        known = self._summaries.get(run_id)
        if known is None or known.series:
            return known
        cached = self._detail
        if cached is not None and cached.id == run_id and cached.record is known.record:
            return cached  # an ended run's series never change: read once while it stays selected
        tele = RunTelemetry(known.record.dir)
        tele.update()
        self._detail = replace(summarise(known.record, tele, LeakWatch().update(tele)), record=known.record)
        return self._detail

    def pid_runs(self) -> dict[int, str]:
        """PID → run id for the processes of live runs (ranks and their main process)."""
        out: dict[int, str] = {}
        for run_id, (record, tele, _) in self._live.items():
            if not record.live:
                continue
            pid = record.status.get("pid")
            if isinstance(pid, int):
                out[pid] = run_id
            for rank_pid in tele.pids:
                out[rank_pid] = run_id
        return out

    def live_telemetry(self, run_id: str) -> RunTelemetry | None:
        """A live run's fold as of the last refresh (serve reads its last step's time and NaN count); None once
        it ended."""
        live = self._live.get(run_id)
        return live[1] if live is not None else None

    def pid_ranks(self) -> dict[int, int]:
        """PID → rank for the ranks of live runs (what the process table's RUN column adds to the run)."""
        return {pid: rank for record, tele, _ in self._live.values() if record.live for pid, rank in tele.pids.items()}


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
        "leaks": {f"{rank}:{state.memory}": asdict(state) for rank, state in summary.leaks.items()},
        "loss_source": summary.loss_source,
        **{key: getattr(summary, key) for key in PROGRESS_KEYS},
        "data_wait": summary.data_wait,
        "use": summary.use,
        "warnings": list(summary.warnings),
        "ranks": [row.to_dict() for row in summary.ranks],
    }


PROGRESS_KEYS = ("total_steps", "total_source", "progress", "eta_s", "step_time_s", "median_step_s")
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
            leaks=leaks,
            series=False,
            loss_source=row.get("loss_source"),
            data_wait=row.get("data_wait"),
            use=dict(row.get("use") or {}),
            warnings=tuple(str(w) for w in row.get("warnings") or ()),
            ranks=rows_from(row.get("ranks")),
            **_progress(row),
        )
    except (KeyError, TypeError, ValueError):
        return None  # a row of another shape: the run is read from its files instead


def _progress(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row.get(key) for key in PROGRESS_KEYS}


def summarise(record: RunRecord, tele: RunTelemetry, leaks: dict[int, LeakState] | None = None) -> RunSummary:
    from gpumon.core.placement.places import of_record

    memory, kind = tele.peak_memory()
    last = tele.exceptions[-1] if tele.exceptions else None
    return RunSummary(
        record=record,
        step=tele.current_step,
        loss=tele.metrics.get("loss"),
        samples_per_s=tele.samples_per_s,
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
        rss=tele.rss(),
        leaks=dict(leaks or {}),
        loss_source=tele.loss_source,
        loss_note=tele.nonfinite.words(tele.metrics.get("loss")),
        data_wait=tele.feeding.wait_share(),
        warnings=tuple(f"unreadable: {why}" for why in record.unreadable) + run_warnings(tele),
        slurm=of_record(record).line(record),  # a Slurm job's
        ranks=rank_rows(tele),
        **progress_fields(record, tele),
        use=tele.use.fields(tele.progress.step_time()),
    )


def progress_fields(record: RunRecord, tele: RunTelemetry) -> dict[str, Any]:
    """progress.py's fields; a stalled run's pace runs to now: it falls while the run waits, never stays."""
    state = record.status.get("state")
    now = time.time() if state == "stalled" else None
    return tele.progress.fields(state in END_STATES, tele.current_step, now)


def run_warnings(tele: RunTelemetry) -> tuple[str, ...]:
    """What slows the run or spoils its loss, short of an alert: the doctor's findings, in its words."""
    from gpumon.core.doctor.divergence import loss_problem
    from gpumon.core.doctor.slow import slow_findings

    found = [f.text for f in slow_findings(tele)] + list(tele.feeding.idle.values())
    loss = loss_problem(tele)
    if loss is not None and loss.kind == "diverging":
        found.append(loss.text)
    return tuple(found)


def read_one(record: RunRecord) -> RunSummary:
    """One run's summary from its files (its supervisor's summary.json), without listing the others."""
    tele = RunTelemetry(record.dir)
    tele.update()
    return summarise(record, tele, LeakWatch().update(tele))


def _with_record(summary: RunSummary, record: RunRecord) -> RunSummary:
    return replace(summary, record=record)
