"""Launcher overhead: a DDP run through ``gpumon launch`` vs the same torchrun command by hand.

Both arms run ``torch.distributed.run --standalone --nproc-per-node 2 -m trainers.ddp``
with the same trainer arguments. "by hand" is timed from Popen to exit.
"gpumon" is timed from just before ``gpumon launch`` to the moment status.json
says the run ended (polled every 20 ms): it includes the CLI, the detached
supervisor, the telemetry bootstrap in each rank and the event writes. Arms
alternate, ``--repeats`` times; the figure is the ratio of the medians. Goal: at most 1.05.

Usage: python bench/launcher_overhead.py [--steps 150] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL = 1.05


def trainer_args(steps: int, ckpt: Path) -> list[str]:
    return ["--epochs", "100", "--max-steps", str(steps), "--checkpoint-dir", str(ckpt)]


def by_hand(steps: int, tmp: Path) -> float:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    argv += ["--max-restarts", "0", "-m", "trainers.ddp", *trainer_args(steps, tmp / "hand")]
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def through_gpumon(steps: int, tmp: Path) -> float:
    env = {**os.environ, "GPUMON_HOME": str(tmp / "home")}
    argv = [sys.executable, "-m", "gpumon", "launch", "ddp", "--nproc", "2", "--"]
    argv += trainer_args(steps, tmp / "gpumon")
    started = time.perf_counter()
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    run_id = out.stdout.split()[-1]
    status = tmp / "home" / "runs" / run_id / "status.json"
    while True:
        try:
            state = json.loads(status.read_text()).get("state")
        except (OSError, ValueError):
            state = None
        if state in ("finished", "failed", "stopped", "killed"):
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    if state != "finished":
        raise SystemExit(f"the gpumon run ended {state}: see {status.parent}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}  load: {os.getloadavg()[0]:.2f}")
    times: dict[str, list[float]] = {"hand": [], "gpumon": []}
    with tempfile.TemporaryDirectory(prefix="gpumon-bench-") as name:
        tmp = Path(name)
        for _ in range(args.repeats):
            times["hand"].append(by_hand(args.steps, tmp))
            times["gpumon"].append(through_gpumon(args.steps, tmp))
    hand, ours = statistics.median(times["hand"]), statistics.median(times["gpumon"])
    print(f"torchrun by hand: {hand:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times['hand'])})")
    print(f"gpumon launch:    {ours:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times['gpumon'])})")
    ratio = ours / hand
    print(f"ratio: {ratio:.3f}  goal <= {GOAL}  {'met' if ratio <= GOAL else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
