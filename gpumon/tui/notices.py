"""What the app tells whatever view shows: a run's new alert, a host's alert, a run that finished well.

Each is a notification (and a bell for an alert). The first read of each feed only counts: what happened
before the app opened is in the views. What happened between the app's opening and that first read (a start of
a few seconds on a busy machine) is still told: a run's alerts raised since (by their times), that it finished.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from textual.app import App

from gpumon.core import format as fmt
from gpumon.core.alerts.history import AlertEntry
from gpumon.core.runs.reading.summary import RunSummary

FRESH_END_S = 60.0  # a run first seen already finished is told only if it ended this recently


class Notices:
    def __init__(self, app: App[None]) -> None:
        self.app = app
        self._alerts_seen: dict[str, int] | None = None
        self._states_seen: dict[str, str] | None = None
        self._alert_ids: set[str] | None = None  # the alerts already known (None: none read yet)
        self._opened = time.time()  # a run that ended since is news, even at the first read

    def run_alerts(self, summaries: Iterable[RunSummary]) -> None:
        """A run's new alert (it started leaking, it failed) is a notification, whatever view shows."""
        first = self._alerts_seen is None
        seen = self._alerts_seen if self._alerts_seen is not None else {}
        for summary in summaries:
            new = self._raised_since_opened(summary) if first else self._new_alerts(summary, seen.get(summary.id, 0))
            for text in new:
                failed = text.startswith("failed")
                self.app.bell()  # heard from another window too
                self.app.notify(
                    f"{summary.id}: {text}",
                    title="gpumon alert",
                    severity="error" if failed else "warning",
                    timeout=15,
                    markup=False,
                )
            seen[summary.id] = summary.alert_count
        self._alerts_seen = seen  # the first read only counts: what happened before the app opened is in the views

    @staticmethod
    def _new_alerts(summary: RunSummary, seen: int) -> tuple[str, ...]:
        """The alerts raised since ``seen`` were counted (counted in all: the summary keeps only the last 20)."""
        fresh = min(summary.alert_count - seen, len(summary.alerts))
        return summary.alerts[len(summary.alerts) - fresh :] if fresh > 0 else ()

    def _raised_since_opened(self, summary: RunSummary) -> tuple[str, ...]:
        """At the first read: the alerts raised since the app opened (a leak found, a failure, while the app
        started), by their times; a summary written before alerts had times: a failure after the opening."""
        times = summary.alert_times
        if len(times) == len(summary.alerts) and any(times):
            return tuple(text for text, t in zip(summary.alerts, times, strict=True) if t >= self._opened)
        if (summary.record.ended or 0.0) < self._opened:
            return ()
        return tuple(text for text in summary.alerts if text.startswith("failed"))[-1:]

    def host_alerts(self, entries: Iterable[AlertEntry]) -> None:
        """An alert of no run (a fleet host down) is a toast and a bell (a run's come with its summary)."""
        entries = list(entries)
        ids = {e.id for e in entries}
        known, self._alert_ids = self._alert_ids, ids
        if known is None:  # the first read: what came before the app opened is in the Alerts view
            return
        for entry in entries:
            if entry.id not in known and entry.run is None:
                self.app.bell()
                self.app.notify(f"{entry.host}: {entry.text}", title=f"gpumon alert: {entry.kind}",
                                severity="warning", timeout=15, markup=False)  # fmt: skip

    def finished(self, summaries: list[RunSummary]) -> None:
        """A run that ends well is a notification too, whatever view shows (a failure is one of the alerts):
        a run seen live that now reads finished, or a new one that finished within the last minute."""
        states = {s.id: s.state for s in summaries}
        seen, self._states_seen = self._states_seen, states
        now = time.time()
        for s in summaries:
            before = seen.get(s.id) if seen is not None else None
            if s.state != "finished" or before == "finished":
                continue
            if seen is None and (s.record.ended or 0.0) < self._opened:
                continue  # the first read: what ended before the app opened is in the Runs view
            if before is None and now - (s.record.ended or 0.0) > FRESH_END_S:
                continue  # an old run that came to the list late
            took, code = s.record.elapsed(), s.record.exit_code
            after = (f" after {fmt.duration(took)}" if took is not None else "") + (
                f" (exit code {code})" if code is not None else ""
            )
            self.app.notify(f"{s.id} finished{after}", title="gpumon", severity="information", timeout=10,
                            markup=False)  # fmt: skip
