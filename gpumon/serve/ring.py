"""24 hours of each GPU in bounded memory: one point a minute (mean utilisation, peak memory, mean power).

The sampler's own history (``core/history.py``) keeps ten minutes at full rate; this keeps the day behind it
at a minute's resolution: 1,440 points per GPU whatever the sampling interval, so a week of uptime costs
what a day does.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

BUCKET_S = 60.0
DAY_S = 86400.0


class _Bucket:
    __slots__ = ("mem", "n", "power", "power_n", "start", "util", "util_n")

    def __init__(self, start: float) -> None:
        self.start = start
        self.n = self.util_n = self.power_n = 0
        self.util = self.power = 0.0
        self.mem: int | None = None

    def add(self, util: float | None, mem: int | None, power: float | None) -> None:
        self.n += 1
        if util is not None:
            self.util += util
            self.util_n += 1
        if power is not None:
            self.power += power
            self.power_n += 1
        if mem is not None:
            self.mem = mem if self.mem is None else max(self.mem, mem)

    def point(self) -> tuple[float, float | None, int | None, float | None]:
        return (
            self.start,
            round(self.util / self.util_n, 1) if self.util_n else None,
            self.mem,
            round(self.power / self.power_n, 1) if self.power_n else None,
        )


class GpuRing:
    """(host, gpu index) -> the day's minute points; ``add`` from the sampling thread, ``points`` from any."""

    def __init__(self, seconds: float = DAY_S, bucket_s: float = BUCKET_S) -> None:
        self.bucket_s = bucket_s
        self.capacity = max(1, int(seconds // bucket_s))
        self._done: dict[tuple[str, int], deque[tuple[float, float | None, int | None, float | None]]] = {}
        self._open: dict[tuple[str, int], _Bucket] = {}
        self._lock = threading.Lock()

    def add(self, host: str, devices: list[dict[str, Any]], t: float) -> None:
        start = t - t % self.bucket_s
        with self._lock:
            for dev in devices:
                key = (host, int(dev.get("index", -1)))
                bucket = self._open.get(key)
                if bucket is None or bucket.start != start:
                    if bucket is not None:
                        self._done.setdefault(key, deque(maxlen=self.capacity)).append(bucket.point())
                    bucket = self._open[key] = _Bucket(start)
                bucket.add(dev.get("gpu_util"), dev.get("mem_used"), dev.get("power_draw"))

    def points(self, host: str, index: int) -> list[list[Any]]:
        """[minute start, util %, peak memory bytes, power W], oldest first, the open minute last."""
        with self._lock:
            done = list(self._done.get((host, index), ()))
            bucket = self._open.get((host, index))
            if bucket is not None:
                done.append(bucket.point())
        return [list(p) for p in done]
