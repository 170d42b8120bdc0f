"""Work done ahead of the keys, one piece at a time, behind any key that came meanwhile.

``call_later`` puts a callback at the end of the app's queue: eight pieces of work put there at once (the help and
the form laid out, six views drawn unseen, 20-300 ms each on a loaded machine) ran before a key typed just after
them, and the first `r` a second after the start waited 1.2-1.9 s. Here the next piece is queued only once the one
before has run, after a turn of the event loop (which puts a key from the driver's thread on the queue), so a key
that arrives waits for one piece at most; and while a key is on its way (it goes through the focused widget's queue
and back) and its frame is still to draw (the app's ``hold``: typeahead.py ``key_drawing``) the pieces wait.
"""

from __future__ import annotations

import asyncio
import time
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
        self.costs: list[tuple[str, float]] = []  # each step's name and main-thread CPU seconds (bench/ahead.py)

    def add(self, callback: Callable[..., object], *args: Any) -> None:
        self._steps.append((callback, args))
        self._queue()

    def pending(self) -> int:
        return len(self._steps)

    def _queue(self) -> None:
        if self._steps and not self._queued:
            self._queued = True
            # through the event loop: a Callback posted from a piece's end went on the queue at once, and Textual
            # takes a pump's messages without giving the loop a turn while its queue holds any: the whole chain ran
            # as one step of the loop, and a key (posted from the driver's thread by the loop) waited for all of it
            asyncio.get_running_loop().call_soon(self._pump.call_later, self._step)

    def _step(self) -> None:
        self._queued = False
        if not self._steps:
            return
        if self._hold():  # a timer, not the queue: the app's queue empties and the key's way goes on
            self._queued = True
            self._pump.set_timer(HOLD_S, self._resume)
            return
        callback, args = self._steps.popleft()
        began = time.thread_time()
        try:
            callback(*args)
        finally:
            self.ran += 1
            self.costs.append((_name(callback, args), time.thread_time() - began))
            self._queue()

    def _resume(self) -> None:
        self._queued = False
        self._queue()


def _name(callback: Callable[..., object], args: tuple[Any, ...]) -> str:
    """``callback``'s name and its first argument's (a view's class, a screen's name)."""
    name = getattr(callback, "__qualname__", repr(callback))
    if args:
        first = args[0]
        name += f"({first if isinstance(first, str) else type(first).__name__})"
    return name
