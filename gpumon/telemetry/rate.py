"""``telemetry.log``'s metrics at most at the step rate (``GPUMON_STEP_RATE``, default 200 a second).

A script that logs every step of a fast loop (or in a tight loop by mistake) writes no more than the
step hook does: values that come sooner wait, merged (latest wins, with the latest step), for the next
write or the exit, so the latest value is always written. A value that is not finite (a NaN loss) is
written at once: the doctor's NaN alert must not miss it.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

STEP_RATE_ENV = "GPUMON_STEP_RATE"
STEP_RATE = 200


def _gap() -> float:
    try:
        rate = int(os.environ.get(STEP_RATE_ENV, STEP_RATE))
    except ValueError:
        rate = STEP_RATE
    return 1.0 / rate if rate > 0 else 0.0


class MetricsLimit:
    def __init__(self, write: Callable[[int | None, dict[str, Any]], None]) -> None:
        self.write = write
        self.gap = _gap()
        self.last = -math.inf
        self.pending: dict[str, Any] = {}
        self.step: int | None = None
        self.pid = os.getpid()
        self.lock = threading.Lock()
        atexit.register(self.flush)

    def add(self, step: int | None, metrics: dict[str, Any]) -> None:
        with self.lock:
            if self.pid != os.getpid():  # a forked child: its parent's pending values are not its own
                self.pid, self.pending, self.last = os.getpid(), {}, -math.inf
            self.pending.update(metrics)
            self.step = step if step is not None else self.step
            now = time.monotonic()
            if now - self.last >= self.gap or not all(_finite(v) for v in metrics.values()):
                self._write(now)

    def _write(self, now: float) -> None:
        values, step = self.pending, self.step
        self.pending, self.step, self.last = {}, None, now
        if values:
            self.write(step, values)

    def flush(self) -> None:
        try:
            with self.lock:
                if self.pid == os.getpid():
                    self._write(time.monotonic())
        except Exception:  # noqa: BLE001 - at exit, telemetry never raises into the script
            pass


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except TypeError:
        return True
