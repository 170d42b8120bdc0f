"""Everything the Runs view and ``gpumon runs`` show, refreshed cheaply.

Ended runs are read once; live runs have their status re-read and their new
events folded in on each ``refresh()``. Safe to call from a worker thread:
the views get immutable ``RunSummary`` objects.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

from gpumon.core.doctor.leak import LeakState, LeakWatch
from gpumon.core.runs.store import END_STATES, RunRecord, RunStore
from gpumon.core.runs.telemetry import RunTelemetry


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


class RunsMonitor:
    """``auto_census``: when a live run's memory starts to warn, ask it once for a tensor census."""

    def __init__(self, store: RunStore | None = None, auto_census: bool = False) -> None:
        self.store = store or RunStore()
        self.auto_census = auto_census
        self._leaks: dict[str, LeakWatch] = {}
        self._census_asked: set[str] = set()
        self._telemetry: dict[str, RunTelemetry] = {}
        self._records: dict[str, RunRecord] = {}
        self._summaries: dict[str, RunSummary] = {}

    def refresh(self) -> list[RunSummary]:
        """All runs, oldest first; only live or new runs are read again."""
        try:
            paths = sorted(p for p in self.store.runs_dir.iterdir() if p.is_dir())
        except OSError:
            paths = []
        seen = set()
        for path in paths:
            run_id = path.name
            seen.add(run_id)
            old = self._records.get(run_id)
            # Skip a run only once its status file says it ended: a run read while running whose
            # supervisor has exited since reads as "lost" until its final status is read.
            if old is not None and old.status.get("state") in END_STATES and run_id in self._summaries:
                continue
            record = self.store.load(path)
            if record is None:
                continue
            self._records[run_id] = record
            tele = self._telemetry.setdefault(run_id, RunTelemetry(path))
            changed = tele.update()
            if changed or old is None or old.status != record.status or run_id not in self._summaries:
                leaks = self._leaks.setdefault(run_id, LeakWatch()).update(tele)
                self._summaries[run_id] = summarise(record, tele, leaks)
                if self.auto_census and record.live and any(s.warning for s in leaks.values()):
                    self._ask_census(record)
            else:
                self._summaries[run_id] = _with_record(self._summaries[run_id], record)
        for gone in set(self._summaries) - seen:
            self._summaries.pop(gone, None)
            self._records.pop(gone, None)
            self._telemetry.pop(gone, None)
            self._leaks.pop(gone, None)
        return sorted(self._summaries.values(), key=lambda s: (s.record.created, s.id))

    def _ask_census(self, record: RunRecord) -> None:
        if record.id in self._census_asked:
            return
        self._census_asked.add(record.id)
        from gpumon.telemetry.census import request_census

        with contextlib.suppress(OSError):  # not our run dir to write (another user's run): the warning still shows
            request_census(record.dir)

    def pid_runs(self) -> dict[int, str]:
        """PID → run id for the processes of live runs (ranks and their main process)."""
        out: dict[int, str] = {}
        for run_id, record in self._records.items():
            if not record.live:
                continue
            pid = record.status.get("pid")
            if isinstance(pid, int):
                out[pid] = run_id
            for rank_pid in self._telemetry[run_id].pids:
                out[rank_pid] = run_id
        return out

    def pid_ranks(self) -> dict[int, int]:
        """PID → rank for the ranks of live runs (what the process table's RUN column adds to the run)."""
        return {
            pid: rank
            for run_id, record in self._records.items()
            if record.live
            for pid, rank in self._telemetry[run_id].pids.items()
        }


def summarise(record: RunRecord, tele: RunTelemetry, leaks: dict[int, LeakState] | None = None) -> RunSummary:
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
        memory_series={r: (tuple(m.used.steps), tuple(m.used.values)) for r, m in sorted(tele.memory.items())},
        exception=f"{last.get('exc_type')}: {last.get('message')}" if last else None,
        notes=tuple(tele.notes[-20:]),
        leaks=dict(leaks or {}),
    )


def _with_record(summary: RunSummary, record: RunRecord) -> RunSummary:
    return replace(summary, record=record)
