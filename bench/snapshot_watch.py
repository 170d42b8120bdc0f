"""What ``gpumon snapshot --json --watch`` costs the host it runs on, and what it puts on the wire.

For each form (``--fields full`` and ``--fields fleet``, 8 simulated GPUs; and the machine's own GPU
source, which is "no GPU" where there is none) the command runs as a subprocess at ``--interval``
(default 0.25 s, the fastest, so the window holds many lines); after 4 lines of warm-up, the
process's CPU (user + system, psutil) over ``--seconds`` (default 20) is divided by the lines read.
Bytes per line count the newline. Every line must parse.

Usage: python bench/snapshot_watch.py [--seconds 20] [--interval 0.25]
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

import psutil

WARMUP_LINES = 4


def measure(extra: Sequence[str], seconds: float, interval: float) -> tuple[float, float, int]:
    """(CPU ms per line, median bytes per line, lines)."""
    argv = [sys.executable, "-m", "gpumon", "snapshot", "--json", "--watch", "--interval", f"{interval:g}", *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        for _ in range(WARMUP_LINES):
            json.loads(proc.stdout.readline())
        watched = psutil.Process(proc.pid)
        before = watched.cpu_times()
        sizes = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            json.loads(line)
            sizes.append(len(line))
        after = watched.cpu_times()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    cpu = (after.user + after.system) - (before.user + before.system)
    return 1000 * cpu / len(sizes), statistics.median(sizes), len(sizes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.25)
    args = parser.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    cases = (
        ("8 simulated GPUs, --fields full", ["--simulate", "8", "--fields", "full"]),
        ("8 simulated GPUs, --fields fleet", ["--simulate", "8", "--fields", "fleet"]),
        ("this machine's GPU source, --fields fleet", ["--fields", "fleet"]),
    )
    for label, extra in cases:
        cpu_ms, size, lines = measure(extra, args.seconds, args.interval)
        at_one_s = cpu_ms / 10  # ms per second at --interval 1 -> percent of one core
        print(
            f"{label}: {cpu_ms:.2f} ms CPU per line ({at_one_s:.2f}% of one core at 1 s), "
            f"{size:.0f} bytes/line, n={lines}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
