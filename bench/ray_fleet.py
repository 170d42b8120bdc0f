"""``gpumon --ray``: time to the first full state of a 2-node Ray cluster, and the cost of polling it.

A real cluster on this machine (``ray.cluster_utils.Cluster``: a head and one more node, 1 CPU each),
each node with 8 simulated GPUs. Per repeat: ``RayFleet.start()`` until every node is live with a
snapshot (the driver process starts, imports Ray, joins, places one actor per node, and each actor
answers once), then ``--seconds`` of polling at ``--interval``, reading the CPU time of

- gpumon's own process (its reader thread: it does nothing else here),
- the Ray driver process (``ray.nodes()``, one ``sample`` call per node, ``ray.wait``, one JSON line),
- each node's gpumon actor (one GPU and host sample per call),

per interval. ``stop()`` is timed too. Medians over ``--repeats``.

Usage: python bench/ray_fleet.py [--repeats 3] [--seconds 30] [--interval 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from gpumon.core.fleet.ray_source import RayFleet, settled


def agents() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if any("NodeAgent" in a for a in p.info["cmdline"] or ())]


def cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def one(address: str, interval: float, seconds: float) -> dict[str, float]:
    me = psutil.Process()
    fleet = RayFleet(address, interval, simulate=8, seed=0)
    started = time.monotonic()
    fleet.start()
    states = fleet.wait(lambda s: settled(s) and len(s) == 2 and all(h.link == "live" for h in s), 120)
    first = time.monotonic() - started
    assert all(h.link == "live" for h in states) and len(states) == 2, states
    assert fleet._proc is not None
    driver = psutil.Process(fleet._proc.pid)
    workers = agents()
    before = (cpu(me), cpu(driver), [cpu(w) for w in workers])
    time.sleep(seconds)
    after = (cpu(me), cpu(driver), [cpu(w) for w in workers])
    latency = [h.latency_ms for h in fleet.state() if h.latency_ms is not None]
    stopping = time.monotonic()
    fleet.stop()
    ticks = seconds / interval
    return {
        "first": first,
        "gpumon_ms": (after[0] - before[0]) / ticks * 1000,
        "driver_ms": (after[1] - before[1]) / ticks * 1000,
        "actor_ms": statistics.mean(a - b for a, b in zip(after[2], before[2], strict=True)) / ticks * 1000,
        "latency_ms": statistics.median(latency),
        "stop": time.monotonic() - stopping,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    from ray.cluster_utils import Cluster

    print(f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, load {os.getloadavg()}")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        runs = [one(cluster.address, args.interval, args.seconds) for _ in range(args.repeats)]
    finally:
        cluster.shutdown()
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"{key:12} median {statistics.median(values):8.2f}   runs {', '.join(f'{v:.2f}' for v in values)}")


if __name__ == "__main__":
    main()
