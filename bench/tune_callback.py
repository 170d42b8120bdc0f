"""Cost of gpumon's Tune callback per trial result (goal under 50 µs), in the driver's thread.

Calls ``GpumonCallback.on_trial_result`` the way Tune's controller does, with
a result dict shaped like a real one (Tune's bookkeeping keys, a config and a
few metrics), writing to a real event file in a temporary run directory.
Prints the median over --rounds rounds of --calls calls each.

Usage: python bench/tune_callback.py [--calls 20000] [--rounds 5] [--numpy]

--numpy: the metrics are numpy scalars (np.float32/np.float64/np.int64), as many trainables report them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

GOAL_US = 50.0


def result(i: int, np: object = None) -> dict[str, object]:
    wrap = (lambda kind, v: getattr(np, kind)(v)) if np is not None else (lambda kind, v: v)
    return {
        "loss": wrap("float32", 1.0 / (i + 1)), "accuracy": wrap("float64", 0.5), "val_loss": wrap("float64", 0.7),
        "step": wrap("int64", i), "training_iteration": i + 1,
        "trial_id": "a1b2c3d4", "experiment_id": "e" * 32, "date": "2026-11-21_15-00-00",
        "timestamp": 1795272243, "time_this_iter_s": 0.01, "time_total_s": 0.01 * i, "pid": 12345,
        "hostname": "trainbox", "node_ip": "10.0.0.1", "config": {"lr": 0.01, "l1": 64, "l2": 32},
        "time_since_restore": 0.01 * i, "iterations_since_restore": i + 1, "done": False,
        "checkpoint_dir_name": None,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--numpy", action="store_true", help="numpy scalar metrics")
    args = parser.parse_args()
    from gpumon.tune.callback import GpumonCallback

    trial = SimpleNamespace(trial_id="a1b2c3d4", config={"lr": 0.01})
    numpy = __import__("numpy") if args.numpy else None
    results = [result(i, numpy) for i in range(args.calls)]
    with tempfile.TemporaryDirectory(prefix="gpumon-bench-") as run_dir:
        callback = GpumonCallback(run_dir, metric="loss", mode="min")
        callback.setup(total_num_samples=1)
        per_call = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            for r in results:
                callback.on_trial_result(0, [], trial, r)
            per_call.append((time.perf_counter() - started) / args.calls * 1e6)
        size = sum(os.path.getsize(os.path.join(run_dir, "events", f)) for f in os.listdir(f"{run_dir}/events"))
    median = statistics.median(per_call)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}  load: {os.getloadavg()[0]:.2f}")
    print(f"on_trial_result: median {median:.1f} µs per result (rounds: {', '.join(f'{x:.1f}' for x in per_call)})")
    print(f"event bytes per result: {size / (args.calls * args.rounds):.0f}")
    print(f"goal < {GOAL_US:.0f} µs: {'met' if median < GOAL_US else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
