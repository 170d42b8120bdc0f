"""What /metrics costs with 8 simulated GPUs and 100 live runs: per scrape, and per poll in the background.

Since issue 38's second pass serve renders the exposition once a poll in its poll thread (``exposition.py``),
and a scrape sends those bytes. This bench measures, on views that change as a busy host's do (every GPU's
numbers, and every run's step, loss, pace and histogram, each poll):

- a full render (``generate_latest`` over serve's collector): what the first scrape of each new view cost
  before, on the request path;
- the poll thread's render, per poll: every run changed (the worst case), and only the GPUs changed (runs
  between their supervisors' 2 s summaries);
- a scrape over HTTP against a real serve (``make_server``) on 127.0.0.1 while a poll thread publishes a new
  view each ``--interval`` and renders it (the GIL shared with it, as in serve): wall per scrape, median and
  95th percentile, and the process's CPU per scrape (the client's urllib included: an upper bound);
- /api/events: the state document's encoding, every 2 s for every viewer (each run with a 300-point curve);
- /page/events (and GET /): the page's view rendered from it, each GPU's day of history drawn (3 charts of 1,440
  points) and each run's curve;
- memory: the GPU ring (core of /api/history) filled with 24 h at 1 s for 8 GPUs, by tracemalloc.

    python bench/serve_scrape.py [--runs 100] [--gpus 8] [--ranks 2] [--scrapes 300] [--polls 30]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import tracemalloc
import urllib.request
from dataclasses import replace
from typing import Any

from prometheus_client.exposition import generate_latest

from gpumon.core.gpu import open_gpu_source
from gpumon.core.host import HostSource
from gpumon.core.model import Snapshot
from gpumon.serve.exposition import Exposition
from gpumon.serve.metrics import registry
from gpumon.serve.ring import GpuRing
from gpumon.serve.runs_view import StepHistogram
from gpumon.serve.view import HostView, View


class Views:
    """Views of one busy host, one per ``next()``: the GPUs sampled again, each run ``step`` steps further."""

    def __init__(self, gpus: int, runs: int, ranks: int) -> None:
        self.source, self.host = open_gpu_source(gpus, 0), HostSource()
        self.runs, self.ranks = runs, ranks
        self.hists = {self._id(i): StepHistogram() for i in range(runs)}
        self.tick = 0
        self.series = [[k * 10, 2.0 / (k + 1)] for k in range(300)]  # a live run's loss curve: 300 points at most
        self.gpu_doc = self._gpus()

    @staticmethod
    def _id(i: int) -> str:
        return f"20261127-0400{i % 100:02d}-bench{i:03d}"

    def _gpus(self) -> dict[str, Any]:
        return Snapshot(gpu=self.source.sample(), host=self.host.sample()).to_dict()

    def next(self, runs_step: bool = True) -> View:
        now = time.time()
        self.gpu_doc = self._gpus()
        if runs_step:
            self.tick += 1
        keys = ("gpu_index", "pid", "user", "used_memory", "sm_util")
        processes = tuple({**{k: p.get(k) for k in keys}, "run": None} for p in self.gpu_doc["processes"])
        if not runs_step:  # between the supervisors' summaries: every run's numbers as they were
            return replace(
                self.view, time=now, hosts=(replace(self.view.hosts[0], devices=tuple(self.gpu_doc["devices"])),)
            )
        docs = []
        for i in range(self.runs):
            run_id, step = self._id(i), 1000 + i + 10 * self.tick
            self.hists[run_id].see(step, now)
            docs.append({
                "id": run_id, "name": f"bench {i}", "kind": "script", "state": "running", "host": "bench",
                "live": True, "step": step, "loss": 1.0 / (step + 1), "samples_per_s": 512.0 + self.tick % 7,
                "tokens_per_s": 2.0e5, "mfu": 0.4, "step_time_s": 0.1 + self.tick % 3 / 100,
                "median_step_s": 0.09, "data_wait": 0.05, "memory_bytes": 3 * 2**30 + 1024 * self.tick,
                "progress": step / 100000, "total_steps": 100000, "eta_s": (100000 - step) * 0.1,
                "last_step_t": now, "nonfinite": 0,
                "ranks": [{"rank": r, "pid": 1000 + r, "step": step, "host": "bench",
                           "memory_bytes": 2**30 + 512 * self.tick, "growth_bytes_per_step": 12.0 + self.tick % 5,
                           "memory_leak": False} for r in range(self.ranks)],
                "loss_series": self.series,
            })  # fmt: skip
        host = HostView(
            name="bench", link="local", devices=tuple(self.gpu_doc["devices"]), processes=processes, runs=tuple(docs)
        )
        steps = {k: h.copy() for k, h in self.hists.items()}
        self.view = View(time=now, hosts=(host,), steps=steps, alert_counts={("bench", "failed"): 3})
        return self.view


def _stats(times: list[float]) -> str:
    times = sorted(times)
    return f"median {statistics.median(times) * 1e3:.2f} ms, p95 {times[int(0.95 * len(times))] * 1e3:.2f} ms"


def _cpu_each(views: list[View], fn: Any) -> list[float]:
    out = []
    for view in views:
        t0 = time.process_time()
        fn(view)
        out.append(time.process_time() - t0)
    return out


class _State:  # what the server reads of ServeState: the latest view, the ring, and who hears of new views
    def __init__(self, view: View) -> None:
        self.view, self.ring, self.interval = view, GpuRing(), 1.0
        self.listeners: list[Any] = []

    def publish(self, view: View) -> None:
        for listener in self.listeners:
            listener(view)
        self.view = view


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--polls", type=int, default=30)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between the poll thread's views")
    args = ap.parse_args()
    make = Views(args.gpus, args.runs, args.ranks)
    first = make.next()
    body = generate_latest(registry(lambda: first))
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    print(f"{args.gpus} GPUs, {args.runs} live runs x {args.ranks} ranks: {samples} samples, {len(body)} bytes")

    busy = [make.next() for _ in range(args.polls)]
    full = _cpu_each(busy, lambda v: generate_latest(registry(lambda: v)))
    print(f"a full render (what a new view's first scrape cost before, on the request path): {_stats(full)} CPU")
    expo = Exposition()
    expo.body(first)  # a scrape: the poll thread renders from now on
    cached = _cpu_each(busy, expo.on_view)
    assert expo.body(busy[-1]) == generate_latest(registry(lambda: busy[-1]))  # the same bytes as a full render
    print(f"the poll thread's render, every run and GPU changed: {_stats(cached)} CPU per poll")
    quiet = [make.next(runs_step=False) for _ in range(args.polls)]
    expo.on_view(quiet[0])
    idle = _cpu_each(quiet[1:], expo.on_view)
    print(f"the poll thread's render, only the GPUs changed: {_stats(idle)} CPU per poll")

    from gpumon.serve.api import dumps, state_doc

    encode = _cpu_each(busy, lambda v: dumps(state_doc(v)))
    size = len(dumps(state_doc(busy[-1])))
    print(f"/api/events' encoding, every 2 s while someone watches: {_stats(encode)} CPU, {size} bytes an event")

    from gpumon.serve.events import text_event
    from gpumon.serve.page import render_view

    day = GpuRing()  # each GPU's full day: 1,440 minute points drawn in each of its 3 charts
    day_devices = [{"index": i, "gpu_util": 50.0, "mem_used": 2**34, "power_draw": 300.0} for i in range(args.gpus)]
    for t in range(0, 86400, 60):
        day.add("bench", day_devices, 1.8e9 + t)
    page = _cpu_each(busy, lambda v: text_event(render_view(v, day.points)))
    size = len(text_event(render_view(busy[-1], day.points)))
    print(f"/page/events' rendering (the page's view, = GET /), every 2 s while a page watches: {_stats(page)} CPU, "
          f"{size} bytes an event")  # fmt: skip

    from gpumon.serve.http import make_server

    state = _State(busy[-1])
    server = make_server(state, "127.0.0.1", 0, None)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop = threading.Event()

    def poll() -> None:  # serve's poll thread: a new view each interval, rendered before it is published
        while not stop.wait(args.interval):
            state.publish(make.next())

    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    with urllib.request.urlopen(url) as resp:  # the first scrape: from now on each poll renders
        resp.read()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    http, cpu0, wall0 = [], time.process_time(), time.perf_counter()
    for _ in range(args.scrapes):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url) as resp:
            resp.read()
        http.append(time.perf_counter() - t0)
        time.sleep(0.01)  # scrapes spread over several polls
    stop.set()
    poller.join()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    polls = wall / args.interval
    per_scrape = (cpu - polls * statistics.median(cached)) / args.scrapes
    server.shutdown()
    print(
        f"HTTP GET /metrics on 127.0.0.1 while a poll thread renders a new view every {args.interval:g} s: "
        f"{_stats(http)} wall; about {per_scrape * 1e3:.2f} ms CPU per scrape (client included, renders taken out)"
    )

    tracemalloc.start()
    ring = GpuRing()
    devices = [{"index": i, "gpu_util": 50.0, "mem_used": 2**34, "power_draw": 300.0} for i in range(args.gpus)]
    t0 = time.perf_counter()
    for t in range(86400):
        ring.add("bench", devices, 1.8e9 + t)
    filled = time.perf_counter() - t0
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    kept = sum(len(ring.points("bench", i)) for i in range(args.gpus))
    print(f"24 h GPU ring, {args.gpus} GPUs at 1 s: {kept} points kept, {size / 1024:.0f} KiB ({filled:.1f} s to fill)")


if __name__ == "__main__":
    main()
