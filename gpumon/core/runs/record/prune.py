"""Which ended runs to remove (whole, or only their raw events) to keep the state dir's disk bounded.

Never a live run: only runs whose status.json says they ended, and whose supervisor's lock nobody holds and
whose processes are gone (a status written as ended by mistake cannot remove a run that trains). Raw events
are what a run's summary was folded from; removing them keeps the run listed, its charts and its diagnosis.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpumon.core.events import EVENTS_DIR
from gpumon.core.runs.reading.monitor import RunsMonitor
from gpumon.core.runs.record.index import RunIndex
from gpumon.core.runs.record.marks import marked
from gpumon.core.runs.record.store import END_STATES, RunStore
from gpumon.core.runs.supervision.liveness import lock_holder

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


@dataclass
class Outcome:
    removed: list[Candidate] = field(default_factory=list)
    kept: list[tuple[Candidate, str]] = field(default_factory=list)  # and why, in words

    @property
    def freed(self) -> int:
        return sum(c.bytes for c in self.removed)


def apply(store: RunStore, chosen: list[Candidate], events_only: bool) -> Outcome:
    """Remove them. Each run is checked again, by its lock and its processes: one that came back to life is
    kept, saying why. A status that cannot be read (emptied, cut) is no reason to keep an ended run: select
    took its end from the index, and nothing of it lives."""
    out = Outcome()
    for candidate in chosen:
        why = _alive(store, candidate.path)
        if why is not None:
            out.kept.append((candidate, why))
            continue
        target = candidate.path / EVENTS_DIR if events_only else candidate.path
        shutil.rmtree(target, ignore_errors=True)
        if target.exists():
            out.kept.append((candidate, f"could not remove all of {target}"))
            continue
        out.removed.append(candidate)
    if not events_only:
        RunIndex(store.root).remove([c.run_id for c in out.removed])
    return out


def _alive(store: RunStore, path: Path) -> str | None:
    """Why the run must stay (it lives after all), or None."""
    if not path.is_dir():
        return "it is gone already"
    holder = lock_holder(path)
    if holder is not None:  # a supervisor holds it, whatever its status says
        return f"its supervisor (pid {holder}) holds it"
    record = store.load(path)
    state = record.status.get("state") if record is not None else None
    if record is not None and not record.unreadable and state not in END_STATES:
        return f"its status says {state}"
    live = (record.live_processes() if record is not None else []) or sorted(marked(path))
    if live:
        return f"its process {live[0]} still runs"
    return None


def _size(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
