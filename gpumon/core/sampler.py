"""Samples GPU and host sources on a background thread so no view ever waits on NVML."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from gpumon.core.gpu import GpuSource
from gpumon.core.history import DEFAULT_SECONDS, History
from gpumon.core.model import GpuSample, HostSample, Snapshot

MIN_INTERVAL = 0.25


class HostSourceLike(Protocol):
    def sample(self) -> HostSample: ...


def record(history: History, snap: Snapshot) -> None:
    """The series every view draws sparklines from."""
    for dev in snap.gpu.devices:
        history.push(("gpu", dev.index, "util"), dev.gpu_util)
        history.push(("gpu", dev.index, "mem"), dev.mem_percent)
    history.push(("host", "cpu"), snap.host.cpu_percent)
    history.push(("host", "mem"), snap.host.mem_percent)


class Sampler:
    def __init__(
        self,
        gpu: GpuSource,
        host: HostSourceLike,
        interval: float = 1.0,
        history_seconds: float = DEFAULT_SECONDS,
        on_sample: Callable[[Snapshot], None] | None = None,
    ) -> None:
        if interval < MIN_INTERVAL:
            raise ValueError(f"interval must be at least {MIN_INTERVAL} s")
        self.gpu = gpu
        self.host = host
        self.interval = interval
        self.history = History(history_seconds, interval)
        self.on_sample = on_sample
        self.latest: Snapshot | None = None
        self.error: str | None = None  # the last tick's failure, if it failed
        self._stop = threading.Event()
        self._wake = threading.Event()  # the interval changed (or stop): the wait between samples ends
        self._thread: threading.Thread | None = None
        self._first = threading.Event()

    def sample_once(self) -> Snapshot:
        try:
            gpu = self.gpu.sample()
        except Exception as err:  # noqa: BLE001 - a source bug must not kill the monitor
            gpu = GpuSample(source=self.gpu.name, devices=(), time=time.time(), reason=f"GPU source failed: {err!r}")
        try:
            host = self.host.sample()
            self.error = None
        except Exception as err:  # keep the GPUs live on the last host reading
            if self.latest is None:
                raise
            host = self.latest.host
            self.error = f"host sampling failed: {err!r}"
        snap = Snapshot(gpu=gpu, host=host)
        record(self.history, snap)
        self.latest = snap
        self._first.set()
        if self.on_sample is not None:
            self.on_sample(snap)
        return snap

    def set_interval(self, seconds: float) -> None:
        """Sample every ``seconds`` from now on (the settings screen, live): the next sample comes ``seconds`` after
        the last one, not after the old wait (10 s to 1 s takes effect at once). The history keeps its length in
        samples."""
        if seconds < MIN_INTERVAL:
            raise ValueError(f"interval must be at least {MIN_INTERVAL} s")
        self.interval = seconds
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpumon-sampler", daemon=True)
            self._thread.start()

    def wait_first(self, timeout: float | None = None) -> Snapshot | None:
        self._first.wait(timeout)
        return self.latest

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            took = next_at
            try:
                self.sample_once()
            except Exception as err:  # noqa: BLE001 - keep sampling; the next tick may succeed
                self.error = f"sampling failed: {err!r}"
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow NVML): skip missed ticks, do not burst
                next_at = time.monotonic()
                delay = 0
            while self._wake.wait(delay) and not self._stop.is_set():  # a new interval: counted from the last tick
                self._wake.clear()
                next_at = took + self.interval
                delay = max(0.0, next_at - time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.gpu.close()
