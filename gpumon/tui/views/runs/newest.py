"""A run that appears while the app is open (launched here, from the CLI, by a script) becomes the selected run,
so `d` and the detail show the newest run, not an older one.

The rule: a run that was not in the previous read is selected (the newest of them, by creation time) unless
the user moved the selection (a key that moves it, or a click, in the Runs view) during the last ``HOLD_S``
seconds: a selection being made by hand is not taken away. The runs there when the app opens are not "new".
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gpumon.core.runs.reading.summary import RunSummary

HOLD_S = 5.0
MOVES = frozenset({"up", "down", "pageup", "pagedown", "home", "end", "j", "k"})  # the keys that move it


class NewRuns:
    def __init__(self) -> None:
        self.known: set[str] | None = None  # None: no read yet
        self.touched = float("-inf")  # monotonic time of the user's last key or click in the Runs view

    def touch(self, key: str | None = None) -> None:
        """The user clicked (no ``key``) or pressed ``key`` in the Runs view."""
        if key is None or key in MOVES:
            self.touched = time.monotonic()

    def appeared(self, summaries: Sequence[RunSummary]) -> str | None:
        """The run to select now: the newest of the runs new since the last read; None on the first read,
        when none is new, or while the user's hand is on the selection."""
        known, self.known = self.known, {s.id for s in summaries}
        if known is None or time.monotonic() - self.touched < HOLD_S:
            return None
        new = [s for s in summaries if s.id not in known]
        return max(new, key=lambda s: (s.record.created, s.id)).id if new else None
