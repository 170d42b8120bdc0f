"""Ray Tune experiments in the state dir, for the Trials view: a cheap list and frozen snapshots.

An experiment is a run whose ``events/`` folder holds the Tune callback's file
(``tune.<pid>.jsonl``). ``ExperimentsMonitor.refresh()`` finds them with one
directory listing per run (other runs' events are never read) and folds only
the Tune files, incrementally; ended runs are read once. ``snapshot()`` hands
the UI immutable rows and rebuilds only the rows of trials whose events
changed, so a refresh of 1,000 trials costs what the changed ones cost. Meant
for one worker thread: nothing it returns is changed afterwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from gpumon.core.events import EVENTS_DIR, SUFFIX, EventReader
from gpumon.core.runs.reading.trials import ACTIVE, Experiment, Trial, flatten, over_status, trial_status
from gpumon.core.runs.record.store import END_STATES, LIVE_STATES, RunRecord, RunStore, read_json
from gpumon.core.runs.supervision.control import stop_requested_at, trials_to_stop

TUNE_SOURCE = "tune"
Curve = tuple[tuple[int, ...], tuple[float, ...]]  # steps, values


def has_tune_events(run_dir: Path) -> bool:
    try:
        with os.scandir(run_dir / EVENTS_DIR) as entries:
            return any(e.name.startswith(f"{TUNE_SOURCE}.") and e.name.endswith(SUFFIX) for e in entries)
    except OSError:
        return False


class TuneEventReader(EventReader):
    """Only the Tune callback's files: the ranks' per-step events are not the Trials view's business."""

    def files(self) -> list[Path]:
        return [p for p in super().files() if p.name.startswith(f"{TUNE_SOURCE}.")]


@dataclass(frozen=True, slots=True)
class TrialRow:
    id: str
    status: str  # Tune's status, or LOST / STOPPED (trials.trial_status)
    params: dict[str, Any]  # the trial's config, flattened
    iteration: int | None
    time_total_s: float | None
    pid: int | None  # the trial's worker process (matched to the GPU's processes)
    metrics: dict[str, float]  # latest
    best: float | None  # this trial's best value of the experiment's metric
    error: str | None
    stopping: bool = False  # a stop was asked for and the trial has not ended yet
    hostname: str | None = None  # where the worker runs (Tune's hostname, node_ip): its pid is that node's
    node_ip: str | None = None


@dataclass(frozen=True, slots=True)
class TrialCurves:
    trial_id: str
    revision: int
    curves: dict[str, Curve]  # metric -> (iterations, values)


@dataclass(frozen=True, slots=True)
class ExperimentInfo:
    """One line of the experiment list."""

    run_id: str
    run_dir: Path
    label: str  # the run's name, search file or program
    kind: str  # the run's kind: "tune" for gpumon tune, whose stopper reads stop requests
    created: float
    state: str  # the run's state: running, finished, lost, ...
    metric: str | None
    mode: str | None
    search_alg: str | None
    scheduler: str | None
    num_samples: int | None
    trials: int
    done: int
    running: int
    errors: int
    best: float | None
    best_id: str | None
    ended: bool  # the callback saw the experiment end
    stop_requested: bool

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True)
class ExperimentSnapshot:
    info: ExperimentInfo
    trials: tuple[TrialRow, ...]  # in the order the trials started
    params: tuple[str, ...]  # the searched parameters (flattened names)
    metrics: tuple[str, ...]  # reported metric names, the experiment's metric first
    skipped: int  # event lines that could not be read
    curves: TrialCurves | None = None  # the requested trial's metrics per iteration

    @cached_property
    def by_id(self) -> dict[str, TrialRow]:
        return {row.id: row for row in self.trials}


@dataclass
class _Tracked:
    record: RunRecord
    reader: TuneEventReader
    state: str = ""
    experiment: Experiment = field(default_factory=Experiment)
    final: bool = False
    stops: frozenset[str] = frozenset()
    stop_all: bool = False
    stop_all_at: float | None = None
    rows: dict[str, tuple[tuple[int, bool, str], TrialRow]] = field(default_factory=dict)
    info: ExperimentInfo | None = None
    info_key: tuple[int, str, bool] | None = None
    snap: ExperimentSnapshot | None = None
    snap_key: tuple[object, ...] | None = None


class ExperimentsMonitor:
    def __init__(self, store: RunStore | None = None) -> None:
        self.store = store or RunStore()
        self._tracked: dict[str, _Tracked] = {}
        self._plain: set[str] = set()  # ended runs without Tune events: not looked at again

    def refresh(self) -> list[ExperimentInfo]:
        """Every experiment, newest first; only live or new ones are read again."""
        try:
            paths = [p for p in self.store.runs_dir.iterdir() if p.is_dir()]
        except FileNotFoundError:
            paths = []  # no run yet
        seen = set()
        for path in paths:
            run_id = path.name
            seen.add(run_id)
            tracked = self._tracked.get(run_id)
            if run_id in self._plain or (tracked is not None and tracked.final):
                continue
            if tracked is None and not has_tune_events(path):
                if read_json(path / "status.json").get("state") in END_STATES:
                    self._plain.add(run_id)
                continue
            self._update(path, tracked)
        for gone in set(self._tracked) - seen:
            del self._tracked[gone]
        self._plain &= seen
        infos = [t.info for t in self._tracked.values() if t.info is not None]
        return sorted(infos, key=lambda i: (i.created, i.run_id), reverse=True)

    def _update(self, path: Path, tracked: _Tracked | None) -> None:
        record = self.store.load(path)
        if record is None:
            return
        if tracked is None:
            tracked = self._tracked[record.id] = _Tracked(record, TuneEventReader(path))
        tracked.record, tracked.state = record, record.state
        tracked.final = record.status.get("state") in END_STATES  # its events are all written by now
        exp = tracked.experiment
        for event in tracked.reader.poll():
            exp.apply(event)
        # read for ended runs too (once: they are final): a trial Tune ended at the user's request reads STOPPED
        tracked.stops, tracked.stop_all_at = trials_to_stop(path), stop_requested_at(path)
        tracked.stop_all = tracked.stop_all_at is not None
        key = (exp.revision, tracked.state, tracked.stop_all)
        if key != tracked.info_key:
            tracked.info_key, tracked.info = key, _info(tracked)

    def snapshot(self, run_id: str, trial_id: str | None = None) -> ExperimentSnapshot | None:
        """The experiment's rows (the same object while nothing changed), with ``trial_id``'s curves."""
        tracked = self._tracked.get(run_id)
        if tracked is None or tracked.info is None:
            return None
        exp = tracked.experiment
        over = over_status(exp.ended, tracked.info.live)  # what an active trial reads
        key = (exp.revision, tracked.stops, tracked.stop_all, over, tracked.info, tracked.reader.skipped)
        snap = tracked.snap
        previous = snap.curves if snap is not None else None  # kept while its trial has no new event
        if snap is None or key != tracked.snap_key:
            snap = _snapshot(tracked, over)
            tracked.snap_key = key
        trial = exp.trials.get(trial_id or "")
        curves = None
        if trial is not None:
            same = previous is not None and (previous.trial_id, previous.revision) == (trial.id, trial.revision)
            curves = previous if same else _curves(trial)
        if curves is not snap.curves:
            snap = replace(snap, curves=curves)
        tracked.snap = snap
        return snap


def _info(tracked: _Tracked) -> ExperimentInfo:
    exp, record = tracked.experiment, tracked.record
    best = exp.best_trial()
    statuses = [t.status for t in exp.trials.values()]
    return ExperimentInfo(
        run_id=record.id,
        run_dir=record.dir,
        label=record.spec.label(),
        kind=record.spec.kind,
        created=record.created,
        state=tracked.state,
        metric=exp.metric,
        mode=exp.mode,
        search_alg=exp.search_alg,
        scheduler=exp.scheduler,
        num_samples=exp.num_samples,
        trials=len(statuses),
        done=exp.done,
        running=sum(1 for s in statuses if s in ACTIVE) if tracked.state in LIVE_STATES and not exp.ended else 0,
        errors=statuses.count("ERROR"),
        best=best.metrics.get(exp.metric or "") if best is not None else None,  # its last value (scope "last")
        best_id=best.id if best is not None else None,
        ended=exp.ended,
        stop_requested=tracked.stop_all,
    )


def _snapshot(tracked: _Tracked, over: str | None) -> ExperimentSnapshot:
    exp, cache = tracked.experiment, tracked.rows
    rows = []
    for trial in exp.trials.values():
        stopping = trial.status in ACTIVE and (tracked.stop_all or trial.id in tracked.stops)
        status = trial_status(trial, over, tracked.stops, tracked.stop_all_at)
        key = (trial.revision, stopping and over is None, status)
        hit = cache.get(trial.id)
        if hit is None or hit[0] != key:
            hit = cache[trial.id] = (key, _row(trial, key[1], status))
        rows.append(hit[1])
    names = {name for row in rows for name in row.params}
    if exp.space is not None:  # the searched names only: constants passed in the config are no column
        space = set(exp.space)
        names = {n for n in names if n in space or n.split(".")[0] in space}
        names |= {s for s in space if not any(n == s or n.startswith(f"{s}.") for n in names)}  # none seen yet
    reported = {name for row in rows for name in row.metrics}
    metric = (exp.metric,) if exp.metric in reported else ()
    others = tuple(sorted(reported - set(metric)))
    assert tracked.info is not None
    return ExperimentSnapshot(
        info=tracked.info,
        trials=tuple(rows),
        params=tuple(sorted(names)),
        metrics=(*metric, *others),
        skipped=tracked.reader.skipped,
    )


def _row(trial: Trial, stopping: bool, status: str) -> TrialRow:
    return TrialRow(
        id=trial.id,
        status=status,
        params=flatten(trial.config),
        iteration=trial.iteration,
        time_total_s=trial.time_total_s,
        pid=trial.pid,
        metrics=dict(trial.metrics),
        best=trial.best,
        error=trial.error,
        stopping=stopping,
        hostname=trial.hostname,
        node_ip=trial.node_ip,
    )


def _curves(trial: Trial) -> TrialCurves:
    curves = {name: (tuple(s.steps), tuple(s.values)) for name, s in trial.history.items() if len(s)}
    return TrialCurves(trial.id, trial.revision, curves)
