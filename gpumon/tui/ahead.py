"""Work done ahead of the keys, one piece at a time, behind any key that came meanwhile.

``call_later`` puts a callback at the end of the app's queue: eight pieces of work put there at once (the help and
the form laid out, six views drawn unseen, 20-300 ms each on a loaded machine) ran before a key typed just after
them, and the first `r` a second after the start waited 1.2-1.9 s. Here the next piece is queued only once the one
before has run, so a key that arrives waits for one piece at most; and while a key is on its way (it goes through the
focused widget's queue and back: the app's own queue never empties between pieces queued at once) the pieces wait.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from textual.message_pump import MessagePump

HOLD_S = 0.02  # how often work held for a key looks again


class OneAtATime:
    """Callbacks run in order on ``pump``'s queue, each queued when the one before has run."""

    def __init__(self, pump: MessagePump, hold: Callable[[], bool] = lambda: False) -> None:
        """``hold``: whether to wait (a key on its way), looked at before each piece."""
        self._pump = pump
        self._hold = hold
        self._steps: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self._queued = False  # a step is on the pump's queue
        self.ran = 0  # steps run (tests count them)

    def add(self, callback: Callable[..., object], *args: Any) -> None:
        self._steps.append((callback, args))
        self._queue()

    def pending(self) -> int:
        return len(self._steps)

    def _queue(self) -> None:
        if self._steps and not self._queued:
            self._queued = True
            self._pump.call_later(self._step)

    def _step(self) -> None:
        self._queued = False
        if not self._steps:
            return
        if self._hold():  # a timer, not the queue: the app's queue empties and the key's way goes on
            self._queued = True
            self._pump.set_timer(HOLD_S, self._resume)
            return
        callback, args = self._steps.popleft()
        try:
            callback(*args)
        finally:
            self.ran += 1
            self._queue()

    def _resume(self) -> None:
        self._queued = False
        self._queue()
