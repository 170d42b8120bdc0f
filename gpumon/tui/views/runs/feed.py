"""What the Runs view's reader (tui/reader.py, on the feeds' thread) reads each second (4 times a second while the
view shows a live run), and what tells a read worth handing on."""

from __future__ import annotations

import time

from gpumon.core.gpu import visible_gpu_count
from gpumon.core.runs.reading.monitor import RunsMonitor
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.record.store import RunRecord, RunStore, disk_note
from gpumon.tui.feeds import RunsRefreshed
from gpumon.tui.reader import Always
from gpumon.tui.view import AppContext
from gpumon.tui.views.runs.reading import LogTails

Ask = tuple[RunRecord | None, int | None, tuple[str, ...]]  # the selected run (None: hidden), its log, compared
Read = tuple[RunsRefreshed, tuple[RunSummary, ...] | None]
ASK: Ask = (None, 0, ())
TICK_S = 0.9  # a live run's read is handed on at least this often (a read each second: each of them)


class RunsFeed:
    """The monitor and its reads; used by the reader's thread only (the monitor is never read from two)."""

    def __init__(self, context: AppContext) -> None:
        self.context = context
        self.store = context.store
        self.monitor: RunsMonitor | None = None
        self.visible_gpus = 0
        self.logs = LogTails()
        self._ticked = float("-inf")  # when a read was last handed on for the time alone

    def read(self, ask: Ask) -> Read:
        record, choice, compare = ask
        if self.monitor is None:
            self.store = self.store or RunStore()
            # follow: a live run's row is folded from its events as they come, not from a summary 2 s old
            self.monitor = RunsMonitor(self.store, adopt=not self.context.readonly, follow=True)
            self.visible_gpus = visible_gpu_count() or 0
        monitor = self.monitor
        # The log first: a rank writes a step's event before the script prints the step, so the events read
        # after it hold every step its lines show (the row is never behind the log it is shown with).
        log = self.logs.read(record, choice) if record is not None else None
        summaries = monitor.refresh()
        pids, ranks = monitor.pid_runs(), monitor.pid_ranks()
        detail = monitor.summary(record.id) if record is not None else None
        disk = disk_note(monitor.store.root, {s.id: s.step for s in summaries if s.record.live})
        refreshed = RunsRefreshed(summaries, pids, log, self.visible_gpus, choice, ranks, detail, disk)
        compared = tuple(s for s in map(monitor.summary, compare) if s is not None) if compare else None
        return refreshed, compared

    def fingerprint(self, ask: Ask, read: Read) -> object:
        """What a redraw depends on. The monitor hands the same objects while nothing changed (compared by id:
        the reader keeps the last value handed on alive); a live run's time moves, and a fleet's hosts change
        on their own thread: then a read is handed on each second at least, and every read of a changed run."""
        got, compared = read
        moving = self.context.fleet is not None or any(s.record.live for s in got.summaries)
        ids = (id(got.summaries), id(got.detail), tuple(map(id, compared or ())))
        return ask, ids, got.pids, got.ranks, got.log, got.disk, self._tick() if moving else None

    def _tick(self) -> Always | None:
        """Always() once a second (the elapsed time moves): the reads between, 4 a second while a live run is
        watched (view.py), are handed on only when what they read changed."""
        now = time.monotonic()
        if now - self._ticked < TICK_S:
            return None
        self._ticked = now
        return Always()
