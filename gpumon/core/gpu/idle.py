"""A GPU held and idle: a process that keeps GPU memory while its GPU does nothing, for a sustained time
(a notebook-style script waiting on input, a loop that finished but never exits, a rank stuck before its
first batch). Nobody else can use that memory, and the GPU's hours are spent for nothing.

The rule: the process holds memory on the GPU (NVML's per-process used memory above ``MIN_HELD``) and the
GPU's utilisation has been at most ``IDLE_UTIL`` percent in every sample for ``IDLE_AFTER_S`` seconds. A run
that loads data or checkpoints keeps its GPU busy within a few seconds at a time; five minutes of nothing
is well past any pause seen in the stall rule's runs (docs/benchmarks.md, "Stalls": the longest eval gap
39 s), while a forgotten process is caught before it costs an hour.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gpumon.core.format import duration, size
from gpumon.core.model import GpuSample

IDLE_UTIL = 1.0  # percent
IDLE_AFTER_S = 300.0
MIN_HELD = 64 * 1024**2  # bytes: a CUDA context alone holds ~500 MiB; less is not worth a word


@dataclass(frozen=True)
class HeldIdle:
    gpu: int
    pid: int
    since: float  # when the GPU was first seen idle with this process holding memory
    held: int  # bytes
    now: float

    def describe(self) -> str:
        return f"pid {self.pid} holds {size(self.held)} on GPU {self.gpu} at 0% utilisation for {self.idle_for()}"

    def idle_for(self) -> str:
        return duration(self.now - self.since)


class IdleWatch:
    """Feed it every GPU sample; ``update`` returns the processes held idle past the rule's time."""

    def __init__(self, after_s: float = IDLE_AFTER_S) -> None:
        self.after_s = after_s
        self._since: dict[tuple[int, int], float] = {}  # (gpu, pid) -> first idle sample

    def update(self, sample: GpuSample, pids: Collection[int] | None = None) -> dict[int, HeldIdle]:
        """Processes (``pids`` only, when given) held idle for at least ``after_s``, by pid."""
        now, held, seen = sample.time, {}, set()
        for dev in sample.devices:
            if dev.state != "ok" or dev.gpu_util is None or dev.gpu_util > IDLE_UTIL:
                continue
            for proc in dev.processes:
                if (pids is not None and proc.pid not in pids) or (proc.used_memory or 0) < MIN_HELD:
                    continue
                key = (dev.index, proc.pid)
                seen.add(key)
                since = self._since.setdefault(key, now)
                if now - since >= self.after_s:
                    held[proc.pid] = HeldIdle(dev.index, proc.pid, since, int(proc.used_memory or 0), now)
        self._since = {key: t for key, t in self._since.items() if key in seen}  # busy again, or gone
        return held
