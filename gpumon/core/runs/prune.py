"""Which ended runs to remove (whole, or only their raw events) to keep the state dir's disk bounded.

Never a live run: only runs whose status.json says they ended, and whose supervisor's lock nobody holds and
whose processes are gone (a status written as ended by mistake cannot remove a run that trains). Raw events
are what a run's summary was folded from; removing them keeps the run listed, its charts and its diagnosis.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from gpumon.core.events import EVENTS_DIR
from gpumon.core.runs.index import RunIndex
from gpumon.core.runs.liveness import lock_holder
from gpumon.core.runs.monitor import RunsMonitor
from gpumon.core.runs.store import END_STATES, RunStore

DAY = 86_400.0


@dataclass(frozen=True)
class Candidate:
    run_id: str
    path: Path
    ended: float
    bytes: int  # what removing it frees


def select(store: RunStore, older_than_days: float | None, keep: int | None, events_only: bool) -> list[Candidate]:
    """Ended runs older than ``older_than_days`` or beyond the newest ``keep`` ended ones, oldest first."""
    ended = [s for s in RunsMonitor(store).refresh() if s.record.status.get("state") in END_STATES]
    ended.sort(key=lambda s: (s.record.ended or s.record.created, s.id))
    now = time.time()
    chosen = []
    for position, summary in enumerate(ended):
        when = summary.record.ended or summary.record.created
        old = older_than_days is not None and now - when > older_than_days * DAY
        beyond = keep is not None and position < len(ended) - keep
        if old or beyond:
            target = summary.record.dir / EVENTS_DIR if events_only else summary.record.dir
            size = _size(target)
            if size or not events_only:
                chosen.append(Candidate(summary.id, summary.record.dir, when, size))
    return chosen


def apply(store: RunStore, chosen: list[Candidate], events_only: bool) -> int:
    """Remove them; returns the bytes freed. Each run is checked again: one that came back to life is kept."""
    freed = 0
    removed = []
    for candidate in chosen:
        record = store.load(candidate.path)
        if record is None or record.status.get("state") not in END_STATES or record.live_processes():
            continue
        if lock_holder(candidate.path) is not None:  # a supervisor holds it, whatever its status says
            continue
        target = candidate.path / EVENTS_DIR if events_only else candidate.path
        shutil.rmtree(target, ignore_errors=True)
        freed += candidate.bytes
        removed.append(candidate.run_id)
    if not events_only:
        RunIndex(store.root).remove(removed)
    return freed


def _size(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
