"""The feeds' reads (the runs, the alerts) on one long-lived thread: each reads on its interval, and hands on what it
read only when that changed.

A Textual thread worker per poll started a thread and posted its state messages each time (1-2 a second at
idle, most of gpumon's idle CPU); a thread per feed woke on its own beat (1.5 wake-ups a second at rest, each a cold
start of the interpreter on a quiet machine, 0.1-0.3 ms however little it read). Here both feeds share one thread,
woken once for every read due then, and an unchanged read posts nothing. A slow read (a state dir of thousands of
runs, read once) delays the other feed's read, never a sample: the sampler keeps its own thread.

The thread wakes just after the app drew a sample's frame (``frame_drawn``), while the machine is awake: woken on
its own between frames it cost 0.45-0.5 ms a second at rest for reads of 0.08 ms; just after a frame 0.27-0.41 ms.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

Ask = TypeVar("Ask")
Got = TypeVar("Got")

TOGETHER_S = 0.25  # a read due this soon is done with the one due now
BEAT_S = 1.0  # the readers' next reads fall on one grid of this step: an asked read (a view shown) puts its reader
# off the others' beat for one read only (a wake-up each for the runs and the alerts fell apart this way: 1.5 a second)
FRAME_AHEAD_S = 0.5  # a frame drawn: the reads due within this long (at most half the time between frames) go now
FRAME_LATE_S = 0.5  # while frames come each beat, a read due waits this long for the next one


class _Beat:
    """The one thread the readers share: it sleeps until the first read due, then does every read due by then."""

    def __init__(self) -> None:
        self._due: dict[Reader[Any, Any], float] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._origin = time.monotonic()
        self._frame_at = float("-inf")  # when the app last drew a sample's frame (frame_drawn)
        self._ahead = 0.0  # a frame came: the reads due within this long are done now
        self.wakes = 0  # the thread's wake-ups with a read due (tests count them)
        self.frame_wakes = 0  # of them, on a frame

    def frame_drawn(self) -> None:
        """The app drew a sample's frame, so the machine is awake: reads due before the next frame are done now, and
        the beat moves onto the frames' (the module's docstring says what it saves)."""
        with self._changed:
            now = time.monotonic()
            ahead = min(FRAME_AHEAD_S, (now - self._frame_at) / 2)
            self._origin = self._frame_at = now
            if self._due and min(self._due.values()) <= now + ahead:
                self._ahead = ahead
                self._changed.notify_all()

    def on_beat(self, due: float, interval: float) -> float:
        """The grid's moment nearest ``due``, never less than half an interval before it; a reader faster than the
        beat (the Runs view on a live run) keeps its own pace: the grid would stretch its gaps to a beat."""
        if interval < BEAT_S:
            return due
        step = round((due - self._origin) / BEAT_S) * BEAT_S
        return max(self._origin + step, due - interval / 2)

    def add(self, reader: Reader[Any, Any], at: float) -> None:
        with self._changed:
            self._due[reader] = at
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="gpumon feeds reader", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def remove(self, reader: Reader[Any, Any]) -> None:
        with self._changed:
            self._due.pop(reader, None)
            self._changed.notify_all()

    def _loop(self) -> None:
        while True:
            with self._changed:
                if not self._due:  # every reader stopped: the thread ends (a new start begins another)
                    self._thread = None
                    return
                now = time.monotonic()
                soonest = min(self._due, key=self._due.__getitem__)
                first = self._due[soonest]
                framed = now - self._frame_at < BEAT_S + FRAME_LATE_S and soonest.interval >= BEAT_S
                late = FRAME_LATE_S if framed else 0.0  # a faster reader waits for no frame (on_beat)
                if first > now + self._ahead and first + late > now:
                    self._changed.wait(first + late - now)
                    continue
                on_frame, ahead, self._ahead = self._ahead > 0, max(self._ahead, TOGETHER_S), 0.0
                ready = [(r, at) for r, at in self._due.items() if at <= now + ahead]
                self.wakes += 1
                self.frame_wakes += on_frame
            for reader, at in ready:
                reader._step()
                with self._changed:
                    if self._due.get(reader) == at:  # not stopped, nor asked again meanwhile (then: at once)
                        self._due[reader] = reader._next_at()


_BEAT = _Beat()


class Reader(Generic[Ask, Got]):
    """``read(ask)`` every ``interval`` s (at once after ``ask``); ``post(got)`` when ``fingerprint(ask, got)``
    differs from the last one handed on; ``failed(error)`` when a read raises, once per distinct error text.

    ``read`` runs only on the readers' one thread: what it keeps (a monitor's cache) is never read from two
    threads."""

    def __init__(
        self,
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
        self._started = False
        self._stopped = False
        self._last: object = _NOTHING
        self._kept: object = None  # the last value handed on: a fingerprint of ids stays valid while it lives
        self._error: str | None = None
        self._read_at = 0.0
        self.reads = 0  # reads done (tests count them)

    def start(self) -> None:
        if not self._started and not self._stopped:
            self._started = True
            _BEAT.add(self, time.monotonic())

    def ask(self, ask: Ask) -> None:
        """Read for ``ask`` now (its answer is handed on if it differs from the last one), then on the interval."""
        self._ask = ask
        self._now()

    def again(self) -> None:
        """Read now with what was last asked, and hand the answer on even if unchanged."""
        self._last = _NOTHING
        self._now()

    def pace(self, interval: float) -> None:
        """Read every ``interval`` s from now on (the next read moved to the new pace)."""
        if interval != self.interval:
            self.interval = interval
            if self._started and not self._stopped:
                _BEAT.add(self, self._next_at())

    def stop(self) -> None:
        self._stopped = True
        _BEAT.remove(self)

    def _now(self) -> None:
        if self._started and not self._stopped:
            _BEAT.add(self, time.monotonic())

    def _next_at(self) -> float:
        return _BEAT.on_beat(self._read_at + self.interval, self.interval)

    def _step(self) -> None:
        if self._stopped:
            return
        self._read_at = time.monotonic()
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
            if mark != self._last and not self._stopped:
                self._last, self._kept = mark, got
                self._post(got)


class Always:
    """A fingerprint part that never equals another: what holds it is handed on at every read (a live run's
    elapsed time moves each second)."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


_NOTHING = Always()


def frame_drawn() -> None:
    """The app drew a sample's frame: the feeds' reads due soon are done now (_Beat.frame_drawn)."""
    _BEAT.frame_drawn()
