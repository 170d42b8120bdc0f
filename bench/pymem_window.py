"""What a tracemalloc window costs a training loop (issue 52): the steps inside it, and the pauses it makes.

A fresh process runs a small CPU training step plus per-step Python work (``--objects`` small dicts made and
dropped each step, the allocation-heavy case tracemalloc slows most) and caches 256 KiB of bytes a step in a
dict that never evicts (the leak the window names). gpumon's trigger (telemetry/pymem.py) is driven as the step
hook drives it: a request, tracemalloc on, a snapshot one step later, a second ``--steps`` steps after that.
Reported: the median step outside the window and inside it (ratio), the pauses at the two snapshots (the
event's ``ms``: snapshots, compare and the holder search), the window's wall time, and what it named.

Usage: python bench/pymem_window.py [--objects 0,2000] [--frames 1,8] [--steps 20] [--warm 200]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, statistics, sys, tempfile, time
import torch
from gpumon.core.protocol import request_pymem
from gpumon.telemetry import pymem
from gpumon.telemetry.pymem import PyMemTrigger

objects, window, warm = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
pymem.FRAMES = int(sys.argv[4])
torch.set_num_threads(1)
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
cache = {}
run_dir = tempfile.mkdtemp()
trigger = PyMemTrigger(run_dir, time.time_ns() - 10**9, lambda: 0)
events, times, inside = [], [], []

def step(i):
    cache[i] = torch.full((64, 1024), float(i)).numpy().tobytes()
    junk = [{"i": k, "s": str(k)} for k in range(objects)]
    loss = model(torch.randn(32, 256)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    return junk

for i in range(1, warm + 3 * window + 10):
    if i == warm:
        request_pymem(run_dir, [0], steps=window)
    t = time.perf_counter()
    step(i)
    open_before = trigger.window is not None
    trigger.at_step(i, time.monotonic(), lambda kind, **f: events.append(f))
    dt = time.perf_counter() - t
    (inside if open_before or trigger.window is not None else times).append(dt)
e = events[0]
line = (e.get("lines") or [{}])[0]
print(json.dumps({"outside_us": statistics.median(times[-window * 2:]) * 1e6,
    "inside_us": statistics.median(inside) * 1e6,
    "pause_ms": e.get("ms"), "seconds": e.get("seconds"), "named": f"{line.get('file')}:{line.get('line')}",
    "holder": (line.get("holder") or {}).get("name"), "event_bytes": len(json.dumps(e))}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", default="0,2000")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--frames", default="8", help="tracemalloc frames (gpumon's: 8)")
    args = parser.parse_args()
    print(f"# {platform.machine()} {platform.python_version()}, window {args.steps} steps, warm-up {args.warm}")
    print("| Python objects a step | frames | step outside | step inside | ratio | pauses | window | named |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    child = Path(tempfile.mkdtemp()) / "train.py"  # a file: tracemalloc names the script's lines by file
    child.write_text(CHILD)
    runs = [(int(n), int(f)) for n in args.objects.split(",") for f in args.frames.split(",")]
    for objects, frames in runs:
        out = subprocess.run([sys.executable, str(child), str(objects), str(args.steps), str(args.warm), str(frames)],
                             capture_output=True, text=True, check=True)  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {objects:,} dicts | {frames} | {r['outside_us']:.0f} µs | {r['inside_us']:.0f} µs | "
              f"{r['inside_us'] / r['outside_us']:.2f}x | {r['pause_ms']} ms | {r['seconds']} s | "
              f"{r['named']} `{r['holder']}` ({r['event_bytes']} B event) |")  # fmt: skip


if __name__ == "__main__":
    main()
