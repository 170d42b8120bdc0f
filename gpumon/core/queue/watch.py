"""The GPUs as the queue sees them: each GPU's free memory over the settle window, and the runs' reservations."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from gpumon.core.model import GpuSample
from gpumon.core.queue.plan import GpuState


class GpuWatch:
    """Samples kept for ``settle_s``: a GPU fits only what it has had free for all of that time."""

    def __init__(self, settle_s: float) -> None:
        self.settle_s = settle_s
        self.first: dict[int, float] = {}  # GPU → when it was first seen
        self.seen: dict[int, deque[tuple[float, int, int]]] = {}  # GPU → (time, free bytes, process count)

    def update(self, sample: GpuSample, now: float) -> list[GpuState]:
        out = []
        for dev in sample.devices:
            total = dev.mem_total or 0
            used = dev.mem_used if dev.mem_used is not None else total  # unreadable: taken as full
            history = self.seen.setdefault(dev.index, deque())
            self.first.setdefault(dev.index, now)
            history.append((now, total - used, len(dev.processes)))
            while len(history) > 1 and history[1][0] <= now - self.settle_s:
                history.popleft()  # keep one sample at or before the window's start
            watched = now - self.first[dev.index] >= self.settle_s
            free_now = total - used
            # Settling: since the last sample with less room or a process than now.
            calm = self.first[dev.index]
            for t, free, procs in history:
                if free < free_now or procs > len(dev.processes):
                    calm = t
            users = sorted(
                ((p.user or "?", p.pid, p.command or "?", p.used_memory or 0) for p in dev.processes),
                key=lambda p: -p[3],
            )
            out.append(
                GpuState(
                    index=dev.index,
                    total=total,
                    used=used,
                    settled_free=min(f for _, f, _ in history) if watched else None,
                    settled_idle=watched and all(n == 0 for _, _, n in history),
                    settling_s=max(0.0, now - calm),
                    procs=tuple(users),
                )
            )
        return out


def reservations(
    sample: GpuSample, started: Iterable[tuple[str, tuple[int, ...], int | None, set[int]]]
) -> dict[int, tuple[str, int]]:
    """GPU → (run, bytes) that runs the queue started will still take: what they asked for less what their
    processes (``pids``) already use there. ``started``: (run, its GPUs, --gpu-mem or None, its pids)."""
    by_index = {d.index: d for d in sample.devices}
    out: dict[int, tuple[str, int]] = {}
    for run, gpus, gpu_mem, pids in started:
        for index in gpus:
            dev = by_index.get(index)
            if dev is None:
                continue
            mine = sum(p.used_memory or 0 for p in dev.processes if p.pid in pids)
            if gpu_mem is None and mine:
                continue  # a whole-GPU run whose process shows: its memory is what it uses
            left = (gpu_mem if gpu_mem is not None else dev.mem_total or 0) - mine
            if left > 0:
                name, before = out.get(index, (run, 0))
                out[index] = (name, before + left)
    return out
