"""Ring buffers of recent samples, written by the sampler thread and read by views."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Hashable
from itertools import islice

DEFAULT_SECONDS = 600.0


class History:
    def __init__(self, seconds: float = DEFAULT_SECONDS, interval: float = 1.0) -> None:
        self.capacity = max(2, math.ceil(seconds / interval))
        self._series: dict[Hashable, deque[float]] = {}
        self._lock = threading.Lock()

    def push(self, key: Hashable, value: float | None) -> None:
        if value is None:
            return
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = deque(maxlen=self.capacity)
            series.append(float(value))

    def tail(self, key: Hashable, count: int | None = None) -> list[float]:
        """The newest ``count`` values, oldest first."""
        with self._lock:
            series = self._series.get(key)
            if not series:
                return []
            if count is None or count >= len(series):
                return list(series)
            return list(islice(series, len(series) - count, None))

    def __len__(self) -> int:
        return len(self._series)
