"""One long-lived thread per feed (the runs, the alerts): it reads on its interval, and hands on what it read only
when that changed.

A Textual thread worker per poll started a thread and posted its state messages each time (1-2 a second at
idle, most of gpumon's idle CPU); this thread sleeps between reads, and an unchanged read posts nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Ask = TypeVar("Ask")
Got = TypeVar("Got")


class Reader(Generic[Ask, Got]):
    """``read(ask)`` every ``interval`` s (at once after ``ask``); ``post(got)`` when ``fingerprint(ask, got)``
    differs from the last one handed on; ``failed(error)`` when a read raises, once per distinct error text.

    ``read`` runs only on this thread: what it keeps (a monitor's cache) is never read from two threads."""

    def __init__(
        self,
        name: str,
        interval: float,
        read: Callable[[Ask], Got],
        fingerprint: Callable[[Ask, Got], object],
        post: Callable[[Got], object],
        failed: Callable[[BaseException], None],
        ask: Ask,
    ) -> None:
        self.interval = interval
        self._read, self._fingerprint, self._post, self._failed = read, fingerprint, post, failed
        self._ask = ask
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._last: object = _NOTHING
        self._kept: object = None  # the last value handed on: a fingerprint of ids stays valid while it lives
        self._error: str | None = None
        self.reads = 0  # reads done (tests count them)

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def ask(self, ask: Ask) -> None:
        """Read for ``ask`` now (its answer is handed on if it differs from the last one), then on the interval."""
        self._ask = ask
        self._wake.set()

    def again(self) -> None:
        """Read now with what was last asked, and hand the answer on even if unchanged."""
        self._last = _NOTHING
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            ask = self._ask
            try:
                got = self._read(ask)
                mark = self._fingerprint(ask, got)
            except Exception as error:  # noqa: BLE001 - a read that fails says so once, and is tried again on the interval
                if str(error) != self._error:
                    self._error = str(error)
                    self._failed(error)
            else:
                self._error = None
                self.reads += 1
                if mark != self._last and not self._stop.is_set():
                    self._last, self._kept = mark, got
                    self._post(got)
            self._wake.wait(self.interval)
            self._wake.clear()


class Always:
    """A fingerprint part that never equals another: what holds it is handed on at every read (a live run's
    elapsed time moves each second)."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


_NOTHING = Always()
