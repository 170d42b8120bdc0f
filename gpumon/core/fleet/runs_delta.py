"""A host's runs inside its snapshot stream: the host sends what changed, the fleet merges it.

``gpumon snapshot --json --watch --runs N`` adds a ``runs`` object to a line when the host's runs
(every live one and the newest N ended, the rows of ``gpumon runs --json``) changed since the last line:
``{"full": bool, "rows": [changed or new rows], "gone": [ids no longer listed]}`` or ``{"error": "..."}``.
The first is full. A new, vanished or state-changed run goes out at once; a live run's other changes
(step, loss, memory) at most every ``LIVE_EVERY_S``, so a busy host costs a row per run per 5 s.

One ssh connection per host carries GPUs and runs: polling ``gpumon runs --json`` instead started an
ssh handshake and a gpumon on every host every few seconds, and read the host's whole run index each time;
here the host's RunsMonitor follows its runs incrementally for as long as the stream lives.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

LIVE_EVERY_S = 5.0


class RunsDelta:
    """The sender's side: ``next()`` is the ``runs`` object of the next line, or None when nothing changed."""

    def __init__(self, recent: int, monitor: Any = None, live_every: float = LIVE_EVERY_S) -> None:
        """``monitor``: a RunsMonitor (default: this host's state dir, adopting runs whose supervisor died)."""
        self.recent = recent
        self.live_every = live_every
        self._monitor = monitor
        self._sent: dict[str, dict[str, Any]] = {}  # id -> the row as last sent
        self._sent_at: dict[str, float] = {}
        self._docs: dict[str, tuple[Any, dict[str, Any]]] = {}  # id -> (summary object, its row): rows made once
        self._error: str | None = None
        self._first = True
        self._listed: object = None  # the monitor's list when the rows were last made
        self._made_at = 0.0

    def next(self) -> dict[str, Any] | None:
        try:
            rows = self._rows()
            if rows is None:
                return None
        except Exception as err:  # noqa: BLE001 - an unreadable state dir must not end the GPU stream
            text = f"cannot read the runs there: {err}"
            if text == self._error:
                return None
            self._error = text
            return {"error": text}
        self._error = None
        now = time.monotonic()
        changed = []
        for row in rows:
            old = self._sent.get(row["id"])
            if old == row:
                continue
            due = now - self._sent_at.get(row["id"], 0.0) >= self.live_every
            if old is None or old.get("status") != row.get("status") or due:
                changed.append(row)
                self._sent[row["id"]] = row
                self._sent_at[row["id"]] = now
        listed = {row["id"] for row in rows}
        gone = [run_id for run_id in self._sent if run_id not in listed]
        for run_id in gone:
            del self._sent[run_id]
            self._sent_at.pop(run_id, None)
        if not (changed or gone or self._first):
            return None
        first, self._first = self._first, False
        return {"full": first, "rows": changed, "gone": gone}

    def _rows(self) -> list[dict[str, Any]] | None:
        """The rows now, or None when the monitor handed out the same runs as last time."""
        from gpumon.core.runs.record.listing import run_doc
        from gpumon.core.runs.record.store import END_STATES

        if self._monitor is None:
            from gpumon.core.runs.reading.monitor import RunsMonitor

            self._monitor = RunsMonitor(adopt=True)  # as `gpumon runs` does: no run escapes its supervisor
        listed = self._monitor.refresh()
        now = time.monotonic()
        # The same list object: no run came, went or changed. A live run's state also depends on its
        # supervisor being alive (asked through psutil), so the rows are made again every live_every.
        if listed is self._listed and now - self._made_at < self.live_every:
            return None
        self._listed, self._made_at = listed, now
        rows = []
        docs: dict[str, tuple[Any, dict[str, Any]]] = {}
        for summary in self._monitor.recent(self.recent):
            cached = self._docs.get(summary.id)
            # An ended run's row is final: reused while the monitor hands out the same summary. A live
            # run's row is made again (its state says whether its supervisor still lives).
            ended = cached is not None and cached[0] is summary and cached[1].get("status") in END_STATES
            doc = cached[1] if cached is not None and ended else run_doc(summary)
            docs[summary.id] = (summary, doc)
            rows.append(doc)
        self._docs = docs
        return rows


def merge_runs(
    current: Mapping[str, dict[str, Any]], payload: Mapping[str, Any]
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The reader's side: (id -> row after applying ``payload``, the error it reports or None)."""
    if isinstance(payload.get("error"), str):
        return dict(current), payload["error"]
    rows = {} if payload.get("full") else dict(current)
    for run_id in payload.get("gone") or ():
        rows.pop(run_id, None)
    for row in payload.get("rows") or ():
        if isinstance(row, dict) and isinstance(row.get("id"), str):
            rows[row["id"]] = row
    return rows, None


def ordered(rows: Mapping[str, dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Oldest first, as ``gpumon runs --json`` lists them."""
    return tuple(sorted(rows.values(), key=lambda r: (r.get("started") or 0.0, r["id"])))
