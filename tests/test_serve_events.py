"""/api/events: serve pushes the page's state every ``every_s`` to every viewer from one encoding; a viewer that
stops reading is dropped and never delays the others; the streams are bounded (the next one gets 503)."""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from gpumon.serve.events import MAX_STREAMS, Events
from tests.conftest import wait_until
from tests.serve_helpers import listener, serving


def _open(url: str) -> http.client.HTTPResponse:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", "/api/events")
    return conn.getresponse()


def _docs(resp: http.client.HTTPResponse, n: int) -> list[dict[str, Any]]:
    """The next ``n`` documents of a stream (comment and retry lines skipped)."""
    out = []
    while len(out) < n:
        line = resp.fp.readline()
        assert line, "the stream ended"
        if line.startswith(b"data: "):
            out.append(json.loads(line[6:]))
    return out


def test_every_viewer_gets_each_poll_from_one_encoding(tmp_path: Path) -> None:
    with serving(tmp_path / "home") as (state, url):
        events = listener(state, Events)
        events.every_s = 0.5  # 2 s in serve; two polls of the test's serve
        one, two = _open(url), _open(url)
        assert one.status == 200 and one.headers["Content-Type"] == "text/event-stream"
        assert one.headers["X-Frame-Options"] == "DENY"
        first = _docs(one, 4)
        second = _docs(two, 4)
        times = [d["time"] for d in first]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(gap >= 0.5 for gap in gaps[1:]), times  # after the first (at once), one every every_s
        assert first[0]["hosts"][0]["gpus"] and first[0]["schema"] == 1  # /api/state's document
        assert set(times) & {d["time"] for d in second}  # the same polls, to both
        polls = len({d["time"] for d in first + second})
        assert events.encoded <= polls + 2  # once for every viewer, not once a viewer
        one.close()
        two.close()
        assert wait_until(lambda: events.streams == 0, timeout=30)  # a gone viewer frees its slot


def test_a_viewer_that_stops_reading_is_dropped_and_delays_nobody(tmp_path: Path) -> None:
    with serving(tmp_path / "home", gpus=8) as (state, url):
        events = listener(state, Events)
        events.every_s = 0.0  # every poll: the stuck viewer's buffers fill sooner
        reader = _open(url)
        _docs(reader, 1)
        # a viewer whose socket takes no more bytes: a real socket pair with small buffers, never read
        sender, stuck = socket.socketpair()
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sender.settimeout(1.0)  # serve's write timeout, shortened
        ended = threading.Event()

        def viewer() -> None:
            try:
                events.stream(lambda: state.view, sender.sendall)
            except OSError:
                ended.set()

        threading.Thread(target=viewer, daemon=True).start()
        assert wait_until(lambda: events.streams == 2, timeout=30)
        times = [d["time"] for d in _docs(reader, 6)]  # the reading viewer goes on, a document a poll
        assert len(set(times)) == 6
        assert ended.wait(60), "the stuck viewer was never dropped"
        assert wait_until(lambda: events.streams == 1, timeout=30)
        assert len({d["time"] for d in _docs(reader, 3)}) == 3
        reader.close()
        sender.close()
        stuck.close()


def test_the_streams_are_bounded(tmp_path: Path) -> None:
    with serving(tmp_path / "home") as (state, url):
        events = listener(state, Events)
        streams = [_open(url) for _ in range(MAX_STREAMS)]
        assert all(s.status == 200 for s in streams)
        assert wait_until(lambda: events.streams == MAX_STREAMS, timeout=30)
        refused = _open(url)
        assert refused.status == 503 and b"/api/state" in refused.read()
        streams.pop().close()
        assert wait_until(lambda: events.streams == MAX_STREAMS - 1, timeout=30)
        again = _open(url)
        assert again.status == 200 and _docs(again, 1)
        for s in [*streams, again]:
            s.close()
