"""``/api/events`` (``/api/state``'s document) and ``/page/events`` (the page's view, rendered by page.py) as
server-sent events, every 2 s, to every viewer.

One encoding of each kind for every viewer: the poll thread (a ``ServeState`` listener) encodes a view every
``EVERY_S`` (the polling page's pace: a document of 100 runs with their curves is most of a megabyte), and only
in the kinds someone listens to; each stream's own thread (one per connection, like every request) writes the
newest event to its socket. A slow viewer skips to the newest, and never delays the poll nor another viewer; one
that takes no bytes for ``WRITE_TIMEOUT_S`` is dropped. At most ``MAX_STREAMS`` at once: the next gets 503, and
the page polls ``/api/state`` instead.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping

from gpumon.serve.api import dumps, state_doc
from gpumon.serve.view import View

MAX_STREAMS = 16
EVERY_S = 2.0  # at most one document this often (the first at once)
KEEPALIVE_S = 15.0  # a comment line this often: proxies keep the connection, a gone viewer is noticed
WRITE_TIMEOUT_S = 20.0
RETRY_MS = 2000  # how soon a browser reconnects after serve restarts


class TooMany(Exception):
    """Every stream slot is taken."""


def json_event(view: View) -> bytes:
    return b"data: " + dumps(state_doc(view)) + b"\n\n"  # compact JSON: never a raw newline


def text_event(text: str) -> bytes:
    """Text of many lines as one event: a ``data:`` line each (a browser joins them with newlines). A bare CR
    ends a line in an event stream too: split there, or a run's name could end the event early."""
    return "".join(f"data: {line}\n" for line in re.split(r"\r\n|\r|\n", text)).encode() + b"\n"


class Events:
    def __init__(
        self,
        max_streams: int = MAX_STREAMS,
        keepalive_s: float = KEEPALIVE_S,
        every_s: float = EVERY_S,
        kinds: Mapping[str, Callable[[View], bytes]] | None = None,
    ) -> None:
        self.max_streams = max_streams  # of every kind together
        self.every_s = every_s
        self.keepalive_s = keepalive_s
        self.kinds = dict(kinds or {"json": json_event})  # kind -> its encoding of a view as one event
        self._cond = threading.Condition()
        self._latest: dict[str, tuple[View | None, bytes]] = {k: (None, b"") for k in self.kinds}  # newest encoded
        self._streams: dict[str, int] = dict.fromkeys(self.kinds, 0)
        self._closed = False
        self.encoded = 0  # views encoded (tests: one per poll and kind watched, whatever the number of viewers)

    @property
    def streams(self) -> int:
        return sum(self._streams.values())

    def on_view(self, view: View) -> None:
        """A new poll's view (the poll thread): encoded once for every stream of a kind, if it is time."""
        for kind, n in list(self._streams.items()):
            if n:
                self._offer(kind, view, self.every_s)

    def _offer(self, kind: str, view: View, every_s: float = 0.0) -> None:
        latest = self._latest[kind][0]
        if latest is not None and (latest.time >= view.time or view.time - latest.time < every_s):
            return  # that view or a newer one is out already, or one came out less than every_s ago
        event = self.kinds[kind](view)
        with self._cond:
            newest = self._latest[kind][0]
            if newest is None or newest.time < view.time:
                self._latest[kind] = (view, event)
                self.encoded += 1
            self._cond.notify_all()

    def stream(self, current: Callable[[], View], write: Callable[[bytes], object], kind: str = "json") -> None:
        """Write events until the viewer goes (``write`` raises OSError) or serve closes; raises TooMany."""
        with self._cond:
            if self._closed or self.streams >= self.max_streams:
                raise TooMany
            self._streams[kind] += 1
        try:
            write(f"retry: {RETRY_MS}\n\n".encode())
            self._offer(kind, current())  # the first event at once: the published view, encoded here if no poll did
            sent: list[View | None] = [None]  # the view last written (a cell: the wait's predicate reads it)
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._closed or self._latest[kind][0] is not sent[0], self.keepalive_s)
                    if self._closed:
                        return
                    view, event = self._latest[kind]
                if view is sent[0]:
                    write(b": keepalive\n\n")
                else:
                    write(event)
                    sent[0] = view
        finally:
            with self._cond:
                self._streams[kind] -= 1

    def close(self) -> None:
        """Serve stops: every stream ends."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
