"""What serve knows, published once a poll as one immutable ``View`` that every request reads.

One sampler (the core's ``Sampler``) for every viewer; one ``RunsMonitor`` (summaries, the index: never the
raw events), one ``AlertBook``, an optional fleet. A poll thread folds them into a ``View`` about once a
second; a scrape or an API call only reads the latest one, so N viewers cost one sampler and one reader.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpumon.core.alerts.history import AlertBook
from gpumon.core.runs.reading.cuda_snapshot import kept
from gpumon.core.runs.reading.monitor import RunsMonitor
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.sampler import Sampler
from gpumon.serve.ring import GpuRing
from gpumon.serve.runs_view import StepHistogram, run_doc, thin
from gpumon.serve.view import PROCESS_KEYS, HostView, View

ENDED = 10  # the newest ended runs the page shows (with their loss curves)
ALERTS = 50  # the newest alerts the page shows
HEADLINE_EVERY_S = 15.0  # a live run's doctor headline is worked out again this often


class ServeState:
    def __init__(
        self,
        sampler: Sampler,
        monitor: RunsMonitor | None = None,
        book: AlertBook | None = None,
        fleet: Any = None,
        interval: float = 1.0,
    ) -> None:
        self.sampler = sampler
        self.monitor = monitor or RunsMonitor(adopt=False)  # read only: serve never adopts nor writes an end
        self.book = book or AlertBook(self.monitor.store.root)
        self.fleet = fleet
        self.interval = interval
        self.ring = GpuRing()
        self.view = View(time=time.time())
        self._steps: dict[str, StepHistogram] = {}
        self._headlines: dict[str, tuple[float, tuple[str, str], tuple[bool, bool, int]]] = {}
        self._ended_series: dict[str, list[list[float]]] = {}
        self._alert_ids: set[str] = set()
        self._alert_counts: dict[tuple[str, str], int] = {}
        self._ring_t: float | None = None
        self._snapshots: dict[tuple[str, str], str] = {}  # the local runs' kept CUDA snapshots, of the last poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polled = threading.Event()  # set after each poll (tests and the first request wait on it)
        # called with each new view in the poll thread before it is published (the /metrics render)
        self.listeners: list[Callable[[View], None]] = []

    def start(self) -> None:
        self.sampler.start()
        if self.fleet is not None:
            self.fleet.start()
        self._thread = threading.Thread(target=self._run, name="gpumon-serve-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.fleet is not None:
            self.fleet.stop()
        self.sampler.stop()

    def _run(self) -> None:
        self.sampler.wait_first(5.0)
        while not self._stop.is_set():
            try:
                view = self.poll()
            except Exception as err:  # noqa: BLE001 - serve keeps serving the last view, and says why
                view = replace(self.view, error=f"poll failed: {err!r}")
            self.publish(view)
            self.polled.set()
            self._stop.wait(self.interval)

    def publish(self, view: View) -> None:
        for listener in self.listeners:
            try:
                listener(view)
            except Exception as err:  # noqa: BLE001 - a listener's failure never stops the polls
                view = replace(view, error=f"{getattr(listener, '__qualname__', 'a listener')} failed: {err!r}")
        self.view = view

    def poll(self) -> View:
        now = time.time()
        hosts = [self._local(now)]
        if self.fleet is not None:
            from gpumon.serve.fleet_view import fleet_hosts

            hosts.extend(fleet_hosts(self.fleet.state(), self.ring))
        alerts = self._alerts(hosts[0].name)
        steps = {run_id: hist.copy() for run_id, hist in self._steps.items()}  # the view's own: never mutated
        return View(time=now, hosts=tuple(hosts), alerts=alerts, alert_counts=dict(self._alert_counts), steps=steps,
                    snapshots=dict(self._snapshots))  # fmt: skip

    def _local(self, now: float) -> HostView:
        snap = self.sampler.latest
        doc = snap.to_dict() if snap is not None else None
        name = snap.host.hostname if snap is not None else "localhost"
        if doc is not None and doc["time"] != self._ring_t:
            self._ring_t = doc["time"]
            self.ring.add(name, doc["devices"], doc["time"])
        self.monitor.refresh()
        summaries = self.monitor.recent(ENDED)
        pid_runs, pid_ranks = self.monitor.pid_runs(), self.monitor.pid_ranks()
        live_ids = {s.id for s in summaries if s.record.live}
        for gone in set(self._steps) - live_ids:  # ended runs drop out
            del self._steps[gone]
        runs = tuple(self._run_doc(s, name, now) for s in summaries)
        self._snapshots = {(s.id, p.name): str(p) for s in summaries for p in kept(s.record.dir)}
        for run in runs:  # the page links each (snapshot_page.py)
            run["snapshots"] = [n for (i, n) in self._snapshots if i == run["id"]]
        shown = {s.id for s in summaries}
        self._headlines = {k: v for k, v in self._headlines.items() if k in shown}
        self._ended_series = {k: v for k, v in self._ended_series.items() if k in shown}
        processes = []
        for proc in doc["processes"] if doc is not None else ():
            out = {key: proc.get(key) for key in PROCESS_KEYS}
            out["run"], out["rank"] = pid_runs.get(proc["pid"]), pid_ranks.get(proc["pid"])
            processes.append(out)
        return HostView(
            name=name,
            link="local",
            devices=tuple(doc["devices"]) if doc is not None else (),
            processes=tuple(processes),
            runs=runs,
            queue=sum(1 for s in summaries if s.state == "queued"),
            time=doc["time"] if doc is not None else None,
            source=doc["source"] if doc is not None else "",
            gpu_reason=doc["reason"] if doc is not None else self.sampler.error,
        )

    def _run_doc(self, summary: RunSummary, host: str, now: float) -> dict[str, Any]:
        headline, level = self._headline(summary, now)
        # last_step_t: the row's; headline_level: "bad", "warn", "ok" or "none" (Diagnosis.severity)
        extra: dict[str, Any] = {"nonfinite": None, "headline": headline, "headline_level": level}
        if summary.record.live:
            self._steps.setdefault(summary.id, StepHistogram()).see(summary.step, now)
            tele = self.monitor.live_telemetry(summary.id)
            if tele is not None:
                lasts = [pace.last[0] for pace in tele.progress.paces.values() if pace.last is not None]
                if lasts:  # the live fold's, newer than the summary's
                    extra["last_step_t"] = max(lasts)
                extra["nonfinite"] = tele.nonfinite.count
            return run_doc(summary, host, extra, series=True)
        doc = run_doc(summary, host, extra, series=False)
        if summary.id not in self._ended_series:  # an ended run's series never change: read once
            full = self.monitor.summary(summary.id)
            self._ended_series[summary.id] = thin(full.loss_steps, full.loss_values) if full is not None else []
        doc["loss_series"] = self._ended_series[summary.id]
        return doc

    def _headline(self, summary: RunSummary, now: float) -> tuple[str, str]:
        """The doctor's headline, as ``gpumon doctor`` says it: a live run's every ``HEADLINE_EVERY_S`` (from the
        monitor's fold), and again at once when what the doctor can say changes: the run's first step, its end
        (an ended run's verdict is worked out once more from its files: a leak found in its last seconds), a new
        alert of the run's. An ended run's then stays: its files no longer change."""
        known = self._headlines.get(summary.id)
        # live, stepped, alerts: each change makes the last verdict old (a run's alert is the doctor's finding)
        moment = (summary.record.live, summary.step is not None, summary.alert_count)
        if known is not None and known[2] == moment and (not moment[0] or now - known[0] < HEADLINE_EVERY_S):
            return known[1]
        from gpumon.core.doctor.report import diagnose

        try:
            tele = self.monitor.live_telemetry(summary.id) if summary.record.live else None
            found = diagnose(summary.record, telemetry=tele)
            said = (found.headline(), found.severity())
        except Exception as err:  # noqa: BLE001 - a run the doctor cannot read still shows
            said = (f"the doctor could not read this run: {type(err).__name__}", "warn")
        self._headlines[summary.id] = (now, said, moment)
        return said

    def _alerts(self, host: str) -> tuple[dict[str, Any], ...]:
        entries = []
        with contextlib.suppress(OSError):
            entries = self.book.read()
        for entry in entries:
            if entry.id not in self._alert_ids:  # counted once each: a counter that never goes down
                self._alert_ids.add(entry.id)
                key = (entry.host or host, entry.kind)
                self._alert_counts[key] = self._alert_counts.get(key, 0) + 1
        self._alert_ids = {entry.id for entry in entries}  # bounded: the book keeps the newest few hundred
        keep = ("id", "kind", "text", "t", "run", "state", "host", "status")  # never the channels (URLs)
        return tuple({k: v for k, v in e.to_dict().items() if k in keep} for e in entries[:ALERTS])
