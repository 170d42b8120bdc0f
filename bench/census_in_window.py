"""What a tensor census look costs inside a tracemalloc window (issue 52): why the two go one at a time.

A fresh process holds a small model and ``--objects`` cached Python objects (the Python-object leak the window
looks for), then takes gpumon's census look (telemetry/census.py's ``take_census``, as the step hook takes it)
``--looks`` times with tracemalloc off and as many times inside a window (``tracemalloc.start(8)``, gpumon's
frames). Reported: the median look, off and inside, and the difference: what a census asked beside the window
(census_ask.py before the change) added to the rank's steps on top of the window's own cost (pymem_window.py).

Usage: python bench/census_in_window.py [--objects 2000,200000] [--looks 7]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time, tracemalloc, torch
from gpumon.telemetry.census import take_census
from gpumon.telemetry.pymem import FRAMES

objects, looks = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
cache = {i: bytes(64) for i in range(objects)}

def look():
    t = time.perf_counter()
    take_census(torch)
    return (time.perf_counter() - t) * 1000

for _ in range(2):
    look()
off = [look() for _ in range(looks)]
tracemalloc.start(FRAMES)
inside = [look() for _ in range(looks)]
tracemalloc.stop()
print(json.dumps({"off_ms": statistics.median(off), "inside_ms": statistics.median(inside)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", default="2000,200000")
    parser.add_argument("--looks", type=int, default=7)
    args = parser.parse_args()
    print(f"# {platform.machine()} {platform.python_version()}, {args.looks} looks each")
    print("| cached Python objects | census look, tracemalloc off | inside the window | added |")
    print("| --- | --- | --- | --- |")
    for objects in (int(n) for n in args.objects.split(",")):
        out = subprocess.run([sys.executable, "-c", CHILD, str(objects), str(args.looks)],
                             capture_output=True, text=True, check=True)  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        added = r["inside_ms"] - r["off_ms"]
        print(f"| {objects:,} | {r['off_ms']:.1f} ms | {r['inside_ms']:.1f} ms | {added:+.1f} ms |")


if __name__ == "__main__":
    main()
