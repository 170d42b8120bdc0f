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
from dataclasses import replace
from typing import TYPE_CHECKING

from gpumon.core.runs.reading.summary import RunSummary, from_row, paced, summarise, to_row
from gpumon.core.runs.record.index import RunIndex
from gpumon.core.runs.record.store import END_STATES, RunRecord, RunStore

if TYPE_CHECKING:  # loaded with the first run not ended: a list of ended runs is read from the index (issue 35)
    from gpumon.core.doctor.leak import LeakWatch
    from gpumon.core.runs.reading.telemetry import RunTelemetry


class RunsMonitor:
    """``refresh()`` once a second; ``summary(run_id)`` for one run with its series (the detail)."""

    def __init__(self, store: RunStore | None = None, adopt: bool = False, follow: bool = False) -> None:
        """``adopt``: give a run whose supervisor died a new one (not in --readonly), and write the end of
        a run whose supervisor died with its processes. ``follow``: fold a supervised run's new events here too,
        so that its step is the one its log shows (the supervisor saves its summary every 2 s)."""
        self.store = store or RunStore()
        self.adopt = adopt
        self.follow = follow
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
            vanished = set(self._summaries) - names
            kept = self.index.rows() if any(name in self._live for name in vanished) else {}  # rare: read once
            for gone in vanished:
                row = kept.get(gone)
                summary = from_row(self.store.runs_dir / gone, row) if row is not None else self._summaries[gone]
                if summary is not None and summary.record.status.get("deleted"):
                    self._summaries[gone] = summary  # deleted under its live run: its end is in the index
                    self._live.pop(gone, None)
                    continue
                self._summaries.pop(gone, None)
                self._live.pop(gone, None)
                self._sorted = None
            self._unread = (self._unread & names) | (names - set(self._summaries) - set(self._live))
        # A folder the launcher has just made holds no spec yet, and the folder's mtime will not change
        # again when it does: such names are read again at each refresh until they load.
        for name in sorted(self._unread):
            record = self.store.load(self.store.runs_dir / name)
            if record is not None:
                from gpumon.core.doctor.leak import LeakWatch
                from gpumon.core.runs.reading.telemetry import RunTelemetry

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
        # A supervised run: its supervisor folds the events; reading its summary is enough (and cheap), unless
        # the reader follows: then its new events are folded from where the summary stopped, each once.
        changed = tele.update(events=not tele.final and (self.follow or not supervised))
        old = self._summaries.get(run_id)
        if changed or fresh or old is None or old.record.status != record.status:
            summary = summarise(record, tele, watch.update(tele, ended=not record.live))
            self._summaries[run_id] = summary
            self._sorted = None
        elif not ended and record.live and old.step is not None:  # nothing new: its pace, ETA, quiet run on
            fields = paced(old.record, tele, {"time_split": old.use.get("time_split")})
            if any(getattr(old, key) != value for key, value in fields.items()):
                summary = replace(old, **fields)
                self._summaries[run_id], record = summary, old.record
                self._sorted = None
            else:
                summary, record = old, old.record
        else:
            summary, record = old, old.record  # nothing new: the same objects, so the views skip it
        self._live[run_id] = (record, tele, watch)
        if ended:  # read for the last time: from now on the index has it
            from gpumon.core.runs.reading.telemetry import save_summary

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
        from gpumon.core.doctor.leak import LeakWatch
        from gpumon.core.runs.reading.telemetry import RunTelemetry

        tele = RunTelemetry(known.record.dir)
        tele.update()
        watch = LeakWatch().update(tele, ended=not known.record.live)
        self._detail = replace(summarise(known.record, tele, watch), record=known.record)
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
