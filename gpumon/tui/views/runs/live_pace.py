"""The Runs view's pace while it shows a live run (issue 50).

Its rows keep up with the run's log: the feed reads 4 times a second then (``LIVE_REFRESH_S``), the row of a step
the log shows within half a second. The selected run's detail (two charts, its info) and its log pane are drawn once
a second at most meanwhile, as before: redrawn at each read they tripled the app's CPU (docs/benchmarks.md "The Runs
table and the log"). Another run, another log or a run's end is drawn at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.widget import Widget

from gpumon.core.runs.reading.summary import RunSummary
from gpumon.tui.reader import Reader
from gpumon.tui.throttle import Throttled
from gpumon.tui.views.runs.remote import RemoteRuns
from gpumon.tui.views.runs.run_detail import RunDetail
from gpumon.tui.widgets.log_view import LogTail

REFRESH_S = 1.0
LIVE_REFRESH_S = 0.25  # shown with a live run: a step its log shows is in its row within half a second
DETAIL_S = 1.0  # ... but its detail and log pane are drawn once a second at most


class LivePace(Widget):
    _reader: Reader[Any, Any]
    _live: int  # live runs listed
    selected_id: str | None
    summaries: dict[str, RunSummary]
    remote: RemoteRuns

    if TYPE_CHECKING:  # the view's own

        def _with_series(self, run_id: str | None) -> RunSummary | None: ...

    def _start_pace(self) -> None:
        self._detail_drawn = Throttled(self, self._draw_detail, DETAIL_S)
        self._log_drawn = Throttled(self, self._draw_log, DETAIL_S)
        self._tail: LogTail | None = None  # the selected run's log as last read

    def _pace(self) -> None:
        """Read 4 times a second while a live run is shown, else each second."""
        self._reader.pace(LIVE_REFRESH_S if self.display and self._live else REFRESH_S)

    def _live_selected(self, run_id: str | None) -> bool:
        summary = self.summaries.get(run_id or "")
        return summary is not None and summary.record.live

    def detail_read(self) -> None:
        """The selected run's detail as last read: drawn now, or within a second while the run is live."""
        self._detail_drawn() if self._live_selected(self.selected_id) else self._detail_drawn.now()

    def tail_read(self, tail: LogTail) -> None:
        """The selected run's log as read: another run's or log's at once, a live run's within a second."""
        last, self._tail = self._tail, tail
        fresh = last is None or (last.run_id, last.choice) != (tail.run_id, tail.choice)
        self._log_drawn() if not fresh and self._live_selected(tail.run_id) else self._log_drawn.now()

    def _draw_detail(self) -> None:
        if self.remote.get(self.selected_id) is None and self.remote.note(self.selected_id) is None:  # remote.py's
            self.query_one(RunDetail).show(self._with_series(self.selected_id))

    def _draw_log(self) -> None:
        if self._tail is not None and self._tail.run_id == self.selected_id:
            self.query_one(RunDetail).show_log(self._tail)
