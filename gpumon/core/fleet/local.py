"""The ``local`` host: sampled in this process with gpumon's own GPU source (or the app's sampler), no ssh."""

from __future__ import annotations

import time
from typing import Any

from gpumon import __version__
from gpumon.core.fleet.hosts import Host
from gpumon.core.fleet.link import RUNS_EVERY_S, RUNS_RECENT, BaseLink, Publish
from gpumon.core.fleet.stream import stream_doc
from gpumon.core.model import Snapshot


class LocalLink(BaseLink):
    """Writes the same documents as a remote stream, so a view cannot tell local from remote."""

    def __init__(
        self,
        host: Host,
        interval: float,
        publish: Publish,
        simulate: int | None = None,
        seed: int = 0,
        sampler: Any = None,
        fields: str = "fleet",
        runs_every: float = RUNS_EVERY_S,
        recent: int = RUNS_RECENT,
    ) -> None:
        """``sampler``: the app's running ``Sampler``, whose latest snapshot is read instead of sampling twice."""
        super().__init__(host, interval, publish)
        self.simulate = simulate
        self.seed = seed
        self.sampler = sampler
        self.fields = fields
        self.runs_every = runs_every
        self.recent = recent
        self._runs: Any = None  # a RunsMonitor, made on the first read

    def start(self) -> None:
        self._spawn(self._loop, "local")

    def _loop(self) -> None:
        from gpumon.core.gpu import open_gpu_source
        from gpumon.core.host import HostSource

        source = host = None
        if self.sampler is None:
            source, host = open_gpu_source(self.simulate, self.seed), HostSource()
            self._stop.wait(0.1)  # host CPU percent is a rate: a short first window
        runs_at = 0.0
        try:
            while not self._stop.is_set():
                snap = self.sampler.latest if self.sampler is not None else None
                if source is not None and host is not None:
                    snap = Snapshot(gpu=source.sample(), host=host.sample())
                if snap is not None:
                    self._set(link="live", reason=None, snapshot=stream_doc(snap, self.fields), version=__version__)
                if self.runs_every > 0 and (time.monotonic() >= runs_at or self._poke.is_set()):
                    self._poke.clear()
                    runs_at = time.monotonic() + self.runs_every
                    self._read_runs()
                self._stop.wait(self.interval)
        finally:
            if source is not None:
                source.close()

    def _read_runs(self) -> None:
        try:
            from gpumon.core.runs.reading.monitor import RunsMonitor
            from gpumon.core.runs.record.listing import recent, run_doc

            if self._runs is None:
                self._runs = RunsMonitor()  # adopts nothing: the app's own Runs feed does that here
            rows = tuple(run_doc(s) for s in recent(self._runs.refresh(), self.recent))
        except Exception as err:  # noqa: BLE001 - an unreadable state dir must not stop the GPUs
            self._set(runs_reason=f"cannot read the runs here: {err}")
            return
        self._set(runs=rows, runs_reason=None, runs_at=time.time())
