"""Wall time of ``gpumon snapshot --json``, as a script or cron job sees it.

Runs the console script as a subprocess, once untimed to warm the caches, then
``--runs`` times (default 10) and reports median, min and max; the same again
with ``--simulate 8``. Each run's output must parse as JSON.

The command itself waits until at least 0.1 s after it started sampling, because
host CPU percent is a rate and needs a window; that is a floor no optimisation of
imports can remove. The bare interpreter's start is printed for context as well.

Usage: python bench/snapshot_json.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from startup import HarnessError, gpumon_command, median_wall, ms

GOAL_S = 0.4
CPU_WINDOW_S = 0.1


def one(argv: Sequence[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise HarnessError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    try:
        json.loads(proc.stdout)
    except ValueError as err:
        raise HarnessError(f"{' '.join(argv)} printed no JSON document: {err}") from None
    return took


def bench(argv: Sequence[str], runs: int) -> None:
    one(argv)  # warm the page cache and bytecode; not counted
    times = [one(argv) for _ in range(runs)]
    median = statistics.median(times)
    shown = "gpumon " + " ".join(argv[1:])
    print(f"{shown}: median {ms(median)}, min {ms(min(times))}, max {ms(max(times))} (n={runs})")
    print(f"  goal < {GOAL_S} s: {'met' if median < GOAL_S else 'MISSED'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command (default 10)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    try:
        gpumon = gpumon_command()
        bench([gpumon, "snapshot", "--json"], args.runs)
        bench([gpumon, "snapshot", "--json", "--simulate", "8"], args.runs)
        bare = median_wall([sys.executable, "-c", "pass"], 5)
        print(
            f"floor: the command sleeps until >= {CPU_WINDOW_S:g} s after it starts sampling "
            f"(CPU-percent window); bare interpreter start {ms(bare)} (median of 5)"
        )
    except (HarnessError, OSError, subprocess.SubprocessError) as err:
        print(f"snapshot_json bench failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
