"""The supervisor's look at its ranks' GPUs: a rank holding GPU memory on an idle GPU (core/gpu/idle.py) is
recorded as a ``gpu_idle`` event (``gpu_busy`` when it works again) and alerted once per run. Each rank's
GPU utilisation, averaged over the last few looks, is a ``gpu_use`` event when it moves by ``USE_STEP``
points: the doctor puts it beside an input-bound rank's wait (a GPU that idles while its rank waits).

NVML is opened once, at the first look; a machine without it costs one failed attempt per run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection
from typing import Any

from gpumon.core.events import EventWriter
from gpumon.core.gpu.idle import MIN_HELD, HeldIdle, IdleWatch
from gpumon.core.model import GpuSample

LOOK_EVERY_S = 15.0
USE_LOOKS = 4  # a minute of looks: one NVML reading is an instant's
USE_STEP = 5.0  # percent


def _open_nvml() -> Any:
    from gpumon.core.gpu.nvml import NvmlSource, NvmlUnavailable

    try:
        return NvmlSource()
    except NvmlUnavailable:
        return None


class GpuIdleCheck:
    def __init__(self, open_source: Callable[[], Any] = _open_nvml, every_s: float = LOOK_EVERY_S) -> None:
        self.open_source = open_source
        self.every_s = every_s
        self.source: Any = None
        self.tried = False
        self.watch = IdleWatch()
        self.last: float | None = None
        self.idle: dict[int, HeldIdle] = {}  # pid -> held idle now
        self.alerted = False
        self.use: dict[int, tuple[int, deque[float]]] = {}  # pid -> (GPU, its recent utilisation readings)
        self.told: dict[int, float] = {}  # pid -> the utilisation its last gpu_use said

    def look(self, now: float, pids: Collection[int]) -> tuple[list[HeldIdle], list[int]]:
        """(processes newly held idle, pids busy again) at most once per ``every_s``; nothing without pids."""
        if not pids or (self.last is not None and now - self.last < self.every_s):
            return [], []
        self.last = now
        if self.source is None:
            if self.tried:
                return [], []
            self.tried = True
            self.source = self.open_source()
            if self.source is None:
                return [], []
        sample = self.source.sample()
        self._note_use(sample, pids)
        held = self.watch.update(sample, pids)
        new = [h for pid, h in held.items() if pid not in self.idle]
        busy = [pid for pid in self.idle if pid not in held]
        self.idle = held
        return new, busy

    def _note_use(self, sample: GpuSample, pids: Collection[int]) -> None:
        for dev in sample.devices:
            if dev.state != "ok" or dev.gpu_util is None:
                continue
            for proc in dev.processes:
                if proc.pid in pids and (proc.used_memory or 0) >= MIN_HELD:
                    gpu, readings = self.use.get(proc.pid, (dev.index, deque(maxlen=USE_LOOKS)))
                    if gpu != dev.index:
                        readings = deque(maxlen=USE_LOOKS)
                    readings.append(float(dev.gpu_util))
                    self.use[proc.pid] = (dev.index, readings)
        for pid in [pid for pid in self.use if pid not in pids]:
            del self.use[pid]

    def report(self, now: float, ranks: dict[int, int], events: EventWriter, alert: Callable[[str, str], None]) -> None:
        """Look (``ranks``: the run's rank pids -> rank), write what changed, alert the first time."""
        new, busy = self.look(now, ranks)
        for pid, (gpu, readings) in self.use.items():
            util = sum(readings) / len(readings)
            if pid not in self.told or abs(util - self.told[pid]) >= USE_STEP:
                self.told[pid] = util
                events.write("gpu_use", rank=ranks.get(pid), pid=pid, gpu=gpu, util=round(util, 1))
        for held in new:
            rank = ranks.get(held.pid)
            text = f"GPU held idle: rank {rank} ({held.describe()})"
            events.write("gpu_idle", rank=rank, pid=held.pid, gpu=held.gpu, held=held.held, since=held.since, text=text)
            if not self.alerted:
                self.alerted = True
                alert(text, "gpu_idle")
        for pid in busy:
            events.write("gpu_busy", rank=ranks.get(pid), pid=pid)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
