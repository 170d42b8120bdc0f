"""What one /metrics scrape costs with 8 simulated GPUs and 100 live runs, and what 24 h of GPU history holds.

The scrape is what a request does: ``generate_latest`` over serve's collector reading the latest view (the
view itself is built once a poll, whatever the number of scrapes). Times the collector and exposition
in-process (median and 95th percentile of --scrapes), then over HTTP against a real serve on 127.0.0.1 with
the same view. Memory: the GPU ring (core of /api/history) filled with 24 h at 1 s for 8 GPUs, by
tracemalloc.

    python bench/serve_scrape.py [--runs 100] [--gpus 8] [--ranks 2] [--scrapes 300]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import tracemalloc
import urllib.request

from prometheus_client.exposition import generate_latest

from gpumon.core.gpu import open_gpu_source
from gpumon.core.model import Snapshot
from gpumon.serve.metrics import registry
from gpumon.serve.ring import GpuRing
from gpumon.serve.runs_view import StepHistogram
from gpumon.serve.view import HostView, View


def _view(gpus: int, runs: int, ranks: int) -> View:
    source = open_gpu_source(gpus, 0)
    sample = source.sample()
    from gpumon.core.host import HostSource

    doc = Snapshot(gpu=sample, host=HostSource().sample()).to_dict()
    processes = tuple({**{k: p.get(k) for k in ("gpu_index", "pid", "user", "used_memory", "sm_util")}, "run": None}
                      for p in doc["processes"])  # fmt: skip
    now = time.time()
    docs, steps = [], {}
    for i in range(runs):
        run_id = f"20261127-0400{i:02d}-bench{i:03d}"
        docs.append({
            "id": run_id, "name": f"bench {i}", "kind": "script", "state": "running", "host": "bench", "live": True,
            "step": 1000 + i, "loss": 1.0 / (i + 1), "samples_per_s": 512.0, "tokens_per_s": 2.0e5, "mfu": 0.4,
            "step_time_s": 0.1, "median_step_s": 0.09, "data_wait": 0.05, "memory_bytes": 3 * 2**30,
            "progress": 0.5, "total_steps": 2000 + 2 * i, "eta_s": 100.0, "last_step_t": now, "nonfinite": 0,
            "ranks": [{"rank": r, "pid": 1000 + r, "step": 1000 + i, "host": "bench", "memory_bytes": 2**30,
                       "growth_bytes_per_step": 12.0, "memory_leak": False} for r in range(ranks)],
            "loss_series": [],
        })  # fmt: skip
        hist = StepHistogram()
        for k in range(50):
            hist.see(k * 10, float(k))
        steps[run_id] = hist
    host = HostView(name="bench", link="local", devices=tuple(doc["devices"]), processes=processes, runs=tuple(docs))
    return View(time=now, hosts=(host,), steps=steps, alert_counts={("bench", "failed"): 3})


def _stats(times: list[float]) -> str:
    times = sorted(times)
    return f"median {statistics.median(times) * 1e3:.2f} ms, p95 {times[int(0.95 * len(times))] * 1e3:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--scrapes", type=int, default=300)
    args = ap.parse_args()
    view = _view(args.gpus, args.runs, args.ranks)
    reg = registry(lambda: view)
    body = generate_latest(reg)
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    times = []
    for _ in range(args.scrapes):
        t0 = time.perf_counter()
        generate_latest(reg)
        times.append(time.perf_counter() - t0)
    print(f"{args.gpus} GPUs, {args.runs} live runs x {args.ranks} ranks: {samples} samples, {len(body)} bytes")
    cpu = time.process_time()
    for _ in range(20):
        generate_latest(reg)
    cpu = (time.process_time() - cpu) / 20
    print(f"a new view's scrape (collector + exposition): {_stats(times)} wall; {cpu * 1e3:.1f} ms CPU")

    from gpumon.serve.http import make_server

    class _State:  # what the server reads of ServeState: its latest view and the ring
        def __init__(self) -> None:
            self.view, self.ring = view, GpuRing()

    server = make_server(_State(), "127.0.0.1", 0, None)  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    http = []
    for _ in range(args.scrapes):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url) as resp:
            resp.read()
        http.append(time.perf_counter() - t0)
    server.shutdown()
    print(f"HTTP GET /metrics on 127.0.0.1, the view already rendered (a scrape within its poll): {_stats(http)}")

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
