"""What the GPU did between steps, read without a host-device sync (CUDA only; a CPU run never builds these).

``CatchUp``: a CUDA event recorded on the current stream at each step's end, and asked (``query()``, which
never waits) at the next step's end. When the host has queued a whole step and the GPU has already finished
the one before, the GPU ran dry: it waited for the host (launch- or host-bound, or a sync in the step that
made the host wait for it). The step event carries the share of steps that found it so (``gpu_dry``).

``SyncCount``: around one counted step (flops.py's window), ``torch.cuda.set_sync_debug_mode("warn")``
makes every synchronising op warn (``.item()``, ``.cpu()``, ``print(tensor)``, ``nonzero``); the warnings,
caught, give how many there are and where (file:line of the script's frame).
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from types import ModuleType
from typing import Any

SYNC_WORDS = "synchronizing"  # torch's warning: "called a synchronizing CUDA operation"


class CatchUp:
    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.events: list[Any] = []  # two events, recorded in turn
        self.turn = 0
        self.dry = 0
        self.asked = 0

    def tick(self) -> None:
        """At a step's end: was the previous step's end already done on the GPU? Then mark this one."""
        cuda = self.torch.cuda
        if not self.events:
            self.events = [cuda.Event(), cuda.Event()]  # no timing: the cheapest event
            self.events[0].record()
            return
        previous, current = self.events[self.turn], self.events[1 - self.turn]
        self.asked += 1
        self.dry += bool(previous.query())  # never waits
        current.record()
        self.turn = 1 - self.turn

    def take(self) -> float | None:
        """The share of steps since the last call that found the GPU done with the previous one."""
        if not self.asked:
            return None
        share, self.dry, self.asked = self.dry / self.asked, 0, 0
        return round(share, 3)


class SyncCount:
    """Counts the synchronising ops of one step: ``enter()`` after a step, ``leave()`` after the next."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.catcher: Any = None
        self.caught: list[Any] = []
        self.previous_mode = 0

    def enter(self) -> None:
        cuda = self.torch.cuda
        try:
            self.previous_mode = int(cuda.get_sync_debug_mode())
            self.catcher = warnings.catch_warnings(record=True)
            self.caught = self.catcher.__enter__()
            warnings.simplefilter("always")
            cuda.set_sync_debug_mode("warn")
        except Exception:  # noqa: BLE001 - a torch without it: no count
            self.leave()

    def leave(self) -> dict[str, Any]:
        """{"syncs": n, "sync_sites": [{"site": "train.py:42", "count": k}, ...]} ({} when not counted)."""
        with contextlib.suppress(Exception):
            self.torch.cuda.set_sync_debug_mode(self.previous_mode)
        if self.catcher is None:
            return {}
        with contextlib.suppress(Exception):
            self.catcher.__exit__(None, None, None)
        self.catcher = None
        sites: Counter[str] = Counter()
        for item in self.caught:
            if SYNC_WORDS in str(item.message):
                sites[f"{_short(item.filename)}:{item.lineno}"] += 1
        self.caught = []
        top = [{"site": site, "count": count} for site, count in sites.most_common(3)]
        return {"syncs": sum(sites.values()), "sync_sites": top}


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]
