"""``GpumonStopper``: the search file's [stop] limits plus stop requests from the app or the CLI.

Requests are files in the run directory (``gpumon.core.runs.supervision.control``). Tune
asks the stopper after every result, so the files are read at most every
``CHECK_S`` seconds: a stop takes effect at a trial's next result.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ray.tune import Stopper

from gpumon.core.runs.supervision.control import stop_requested, trials_to_stop

CHECK_S = 0.2


class GpumonStopper(Stopper):
    def __init__(self, run_dir: str | os.PathLike[str], limits: dict[str, float] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.limits = dict(limits or {})
        self._checked = 0.0
        self._stop_all = False
        self._trials: frozenset[str] = frozenset()

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked >= CHECK_S:
            self._checked = now
            self._stop_all = stop_requested(self.run_dir)
            self._trials = trials_to_stop(self.run_dir)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self._refresh()
        if trial_id in self._trials:
            return True
        return any(isinstance(result.get(k), int | float) and result[k] >= v for k, v in self.limits.items())

    def stop_all(self) -> bool:
        self._refresh()
        return self._stop_all
