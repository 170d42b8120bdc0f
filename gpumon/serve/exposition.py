"""``/metrics``' bytes: rendered once a poll in the poll thread, so a scrape only sends them.

The data changes once a poll (about a second), so every scrape of one poll gets the same bytes, rendered by
``prometheus_client`` (``generate_latest``) before the poll's view is published: a scrape never waits on a
render. ``gpumon_poll_timestamp_seconds`` says which poll the numbers are of. A family whose samples did not
change since the last render keeps its bytes (a GPU's memory total, a run's name and total steps): its
rendering is the same bytes ``generate_latest`` would write for it, joined in the same order.

Nobody scraping costs nothing, and a slow scraper little: a poll renders only while someone scraped in the
last ``WARM_S``, and only when the next scrape is due (the shortest of the last gaps between scrapes, less
``LEAD`` polls), so Prometheus every 15 s costs about one render per scrape, not fifteen; the first scrape
after a quiet spell, or one that comes early, renders on its own thread, once. A view older than ``max_age``
(the poll thread stuck) is rendered again on the request path, so ``gpumon_up`` says 0 instead of repeating
the last fresh body.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from gpumon.serve.metrics import MAX_AGE_S, ViewCollector
from gpumon.serve.view import View

WARM_S = 300.0  # after a scrape, polls render for this long (Prometheus scrapes every 15 s to 2 min)
LEAD = 1.5  # polls before a scrape is due that render: the last poll before it is always one of them


class _One(Collector):
    """One family: ``generate_latest`` of it is that family's block of the whole exposition."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Any]:
        yield self.metric


class Exposition:
    """The latest view's exposition: ``on_view`` from the poll thread, ``body`` from any request's."""

    def __init__(
        self,
        max_age: float = MAX_AGE_S,
        warm_s: float = WARM_S,
        poll_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_age = max_age
        self.warm_s = warm_s
        self.poll_s = poll_s
        self.clock = clock
        self._gaps: deque[float] = deque(maxlen=8)  # the last gaps between scrapes (several scrapers: the least)
        self._lock = threading.Lock()  # one render at a time: the family cache is shared
        self._body: tuple[View, bool, bytes] | None = None  # (the view, rendered stale?, its bytes)
        self._families: dict[str, tuple[Any, bytes]] = {}  # name -> (type, help, samples), its bytes
        self._scraped = -1e18  # monotonic time of the latest scrape
        self.renders = 0  # how many times a view was rendered (tests, the bench)

    def on_view(self, view: View) -> None:
        """A new poll's view, before it is published: rendered now while someone scrapes."""
        since = self.clock() - self._scraped
        if since >= self.warm_s:
            return
        if not self._gaps or since >= min(self._gaps) - LEAD * self.poll_s:
            self._render(view, self._stale(view))

    def body(self, view: View) -> bytes:
        """The bytes of ``view`` (the published one): already rendered, unless cold or stale."""
        now = self.clock()
        if self._scraped > 0:
            self._gaps.append(now - self._scraped)
        self._scraped = now
        stale = self._stale(view)
        done = self._body
        if done is not None and done[0] is view and done[1] == stale:
            return done[2]
        return self._render(view, stale)

    def _stale(self, view: View) -> bool:
        return time.time() - view.time > self.max_age

    def _render(self, view: View, stale: bool) -> bytes:
        with self._lock:
            done = self._body
            if done is not None and done[0] is view and done[1] == stale:
                return done[2]  # another thread rendered it while this one waited
            parts, families = [], {}
            for metric in ViewCollector(lambda: view, self.max_age).collect():
                key = (metric.type, metric.documentation, metric.samples)
                known = self._families.get(metric.name)
                text = known[1] if known is not None and known[0] == key else generate_latest(_One(metric))
                families[metric.name] = (key, text)
                parts.append(text)
            self._families = families  # only this render's: a family gone is forgotten
            body = b"".join(parts)
            self._body = (view, stale, body)
            self.renders += 1
            return body
