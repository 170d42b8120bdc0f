"""Wall time of a Ray Tune run with gpumon's callback vs without (goal: ratio at most 1.02).

One local Ray (num_cpus=2, no dashboard) serves every round. Each round runs the
same Tuner twice, in alternating order: 8 trials, 2 at a time, each reporting
--iterations results with --work-ms of sleep per iteration (a stand-in for a
training step that keeps the driver busy with results, which is where a callback
costs). With the callback, events go to a real run directory. Prints per-round
times and the ratio of medians.

Usage: python bench/tune_walltime.py [--rounds 5] [--iterations 100] [--work-ms 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL = 1.02


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--work-ms", type=float, default=10.0)
    parser.add_argument("--trials", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    import ray
    from ray import tune

    from gpumon.core.events import EventReader
    from gpumon.tune import GpumonCallback

    iterations, work = args.iterations, args.work_ms / 1000

    def train(config: dict[str, Any]) -> None:
        for i in range(iterations):
            time.sleep(work)
            tune.report({"loss": config["lr"] / (i + 1), "accuracy": i / iterations})

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    tmp = tempfile.mkdtemp(prefix="gpumon-bench-tune-")

    def once(with_callback: bool, n: int) -> float:
        run_dir = os.path.join(tmp, f"run{n}")
        os.makedirs(run_dir)
        callbacks = [GpumonCallback(run_dir, metric="loss", mode="min")] if with_callback else []
        tuner = tune.Tuner(
            train,
            param_space={"lr": tune.uniform(0.01, 0.1)},
            tune_config=tune.TuneConfig(num_samples=args.trials, max_concurrent_trials=2),
            run_config=tune.RunConfig(storage_path=os.path.join(tmp, "ray"), callbacks=callbacks, verbose=0),
        )
        started = time.perf_counter()
        tuner.fit()
        took = time.perf_counter() - started
        if with_callback:
            results = sum(1 for e in EventReader(Path(run_dir)).each() if e["type"] == "trial_result")
            assert results == args.trials * iterations, results
        return took

    once(True, -1)  # warm-up: worker processes, imports
    plain, with_cb = [], []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        for flag in order:
            (with_cb if flag else plain).append(once(flag, r * 2 + flag))
        print(f"round {r + 1}: without {plain[-1]:.2f} s, with {with_cb[-1]:.2f} s", flush=True)
    ray.shutdown()
    ratio = statistics.median(with_cb) / statistics.median(plain)
    results = args.trials * iterations
    print(f"python {platform.python_version()}, ray {ray.__version__}, load {os.getloadavg()[0]:.2f}")
    print(f"{args.trials} trials x {iterations} results, {args.work_ms:g} ms work each, 2 concurrent")
    print(f"median without callback {statistics.median(plain):.2f} s, with {statistics.median(with_cb):.2f} s")
    print(f"({results / statistics.median(with_cb):.0f} results/s through the callback)")
    print(f"ratio {ratio:.3f}  goal <= {GOAL}  {'ok' if ratio <= GOAL else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
