"""A redraw that runs at most once an interval: a call within it runs once when the interval ends.

The Runs view reads 4 times a second while a live run is shown (its row keeps up with its log); the selected
run's detail (two charts, its info) redrawn at each read tripled the app's CPU for figures a person reads once a
second (docs/benchmarks.md "The Runs table and the log").
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.timer import Timer
from textual.widget import Widget


class Throttled:
    """``action()`` at most every ``interval`` s; ``owner``'s timer runs a call held back, once, at the end."""

    def __init__(self, owner: Widget, action: Callable[[], None], interval: float) -> None:
        self._owner, self._action, self.interval = owner, action, interval
        self._at = float("-inf")  # when it last ran
        self._timer: Timer | None = None

    def __call__(self) -> None:
        wait = self._at + self.interval - time.monotonic()
        if wait <= 0:
            self.now()
        elif self._timer is None:
            self._timer = self._owner.set_timer(wait, self.now)

    def now(self) -> None:
        """Run it now (a change a person must see at once: another run, its end)."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._at = time.monotonic()
        self._action()
