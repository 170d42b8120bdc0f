"""What the CUDA allocator's warnings (issue 52) cost the fold: ``Allocator.fold`` per CUDA step event.

    PYTHONPATH=. python bench/allocator_fold.py [--events N]

The supervisor folds every step event it reads (at most ``GPUMON_STEP_RATE``, 200 a second a rank); this is the
part core/runs/reading/allocator.py adds to each CUDA one (retries window, fragmentation rule). The rank pays
nothing new: ``retries`` and ``ooms`` come from the ``memory_stats`` dict its step sample already builds.
"""

from __future__ import annotations

import argparse
import time

from gpumon.core.runs.reading.allocator import Allocator

GiB = 1024**3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    events = [
        {
            "type": "step",
            "t": 1000 + i * 0.005,
            "step": i,
            "dev": "cuda:0",
            "alloc": 30 * GiB,
            "reserved": 40 * GiB,
            "peak": 35 * GiB,
            "retries": i // 5000,
            "ooms": 0,
        }
        for i in range(1, args.events + 1)
    ]
    runs = []
    for _ in range(5):
        allocator = Allocator()
        allocator.fold("device", {"total": 80 * GiB}, 0)
        start = time.perf_counter()
        for event in events:
            allocator.fold("step", event, 0)
        runs.append((time.perf_counter() - start) / len(events) * 1e6)
    print(f"Allocator.fold: {min(runs):.2f} us per CUDA step event (best of 5, {len(events):,} events)")


if __name__ == "__main__":
    main()
