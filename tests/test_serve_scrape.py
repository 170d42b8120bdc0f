"""A scrape sends bytes the poll thread rendered: a real serve (ServeState on simulated GPUs, the HTTP server)
renders each new view before it publishes it, so a scrape renders nothing; the bytes are prometheus_client's
own for that view (the per-family reuse changes none); a view gone stale says ``gpumon_up 0``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.serve.exposition import Exposition
from gpumon.serve.metrics import registry
from gpumon.serve.state import ServeState
from gpumon.serve.view import View
from tests.conftest import wait_until
from tests.serve_helpers import get, listener, serving


def _families(body: bytes) -> dict:
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServeState, str]]:
    with serving(tmp_path / "home") as both:
        yield both


def test_a_scrape_sends_what_the_poll_thread_rendered(served: tuple[ServeState, str]) -> None:
    state, url = served
    expo = listener(state, Exposition)
    code, _, body = get(url + "metrics")  # the first scrape: nobody scraped before, it renders on its thread
    assert code == 200 and _families(body)["gpumon_up"].samples[0].value == 1.0
    # from now on each poll renders its view before publishing it: wait for a few of them, with no scrape
    seen = {state.view.time}
    assert wait_until(lambda: seen.add(state.view.time) or len(seen) >= 4, timeout=30)
    for _ in range(3):
        view = state.view
        renders = expo.renders
        code, _, body = get(url + "metrics")
        if state.view is not view:
            continue  # a poll came between: what it sent is of a view it did not pin here
        assert expo.renders == renders, "the scrape rendered: the poll thread should have"
        polled = _families(body)["gpumon_poll_timestamp_seconds"].samples[0].value
        assert polled == pytest.approx(view.time)  # the poll the numbers are from, said
        assert body == generate_latest(registry(lambda v=view: v))  # prometheus_client's bytes for that view
        break
    else:
        pytest.fail("every scrape straddled a poll")


def test_the_reused_families_are_the_bytes_a_full_render_writes(served: tuple[ServeState, str]) -> None:
    """The simulated GPUs change every poll, their totals and names never: some families are reused, some
    rendered again; the joined bytes are always generate_latest's for the same view."""
    state, _ = served
    expo = Exposition()
    views: list[View] = []
    for _ in range(6):
        view = state.view
        views.append(view)
        assert expo.body(view) == generate_latest(registry(lambda v=view: v))
        assert wait_until(lambda v=view: state.view is not v, timeout=30)
    assert len({v.time for v in views}) == 6
    used = {s.value for v in views for s in _families(expo.body(v))["gpumon_gpu_utilization_ratio"].samples}
    assert len(used) > 3  # the numbers did change from poll to poll


def test_a_stale_view_says_gpumon_up_0_though_a_fresh_body_was_rendered(served: tuple[ServeState, str]) -> None:
    state, _ = served
    view = View(time=time.time() - 20, hosts=state.view.hosts)
    expo = Exposition(max_age=60)
    expo.on_view(view)
    expo.body(view)
    assert _families(expo.body(view))["gpumon_up"].samples[0].value == 1.0
    expo.max_age = 10  # the same view, now older than serve allows: the poll thread is stuck
    assert _families(expo.body(view))["gpumon_up"].samples[0].value == 0.0


def test_nobody_scraping_costs_no_render(served: tuple[ServeState, str]) -> None:
    state, url = served
    expo = listener(state, Exposition)
    seen = {state.view.time}
    assert wait_until(lambda: seen.add(state.view.time) or len(seen) >= 3, timeout=30)
    assert expo.renders == 0
    assert get(url + "metrics")[0] == 200
    assert expo.renders == 1


def test_a_scraper_every_15_s_costs_a_render_a_scrape_not_one_a_poll(served: tuple[ServeState, str]) -> None:
    """Polls every second, a scrape every 15 s: after the first gap is known, each scrape finds the last poll's
    view rendered (no render on the request path) and the polls between scrapes render at most twice."""
    state, _ = served
    now = [1000.0]
    expo = Exposition(max_age=1e9, poll_s=1.0, clock=lambda: now[0])
    view = state.view

    def poll() -> View:
        now[0] += 1.0
        fresh = View(time=view.time + now[0], hosts=view.hosts)
        expo.on_view(fresh)
        return fresh

    latest = poll()
    expo.body(latest)
    for scrape in range(6):
        before = expo.renders
        for _ in range(15):
            latest = poll()
        polls_rendered = expo.renders - before
        expo.body(latest)
        if scrape == 0:
            continue  # the first gap is not known yet: every poll rendered
        assert expo.renders - before == polls_rendered, "the scrape rendered: the poll before it should have"
        assert 1 <= polls_rendered <= 2, polls_rendered
