"""Telemetry overhead: the same training run with and without gpumon's bootstrap.

Each run is ``python -m trainers.ddp`` (world size 1, tiny preset, digits) for
``--steps`` optimizer steps under a thin wrapper that timestamps every step
with its own optimizer post-hook (the same ~0.1 µs in both arms). "with"
sets GPUMON_RUN_DIR and puts the bootstrap first on PYTHONPATH, so the
trainer's telemetry.log calls write metrics events and the bootstrap writes a
step event (memory sample) per step; "without" sets neither, so both are
no-ops. Arms alternate, ``--repeats`` times each; the figure is the ratio of
the median step times after ``--warmup`` steps. Goal: at most 1.01.

It also times the bootstrap's step hook alone (µs per call) in this process.

Usage: python bench/telemetry_overhead.py [--steps 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL = 1.01
BOOTSTRAP = str(Path(__file__).resolve().parents[1] / "gpumon" / "telemetry" / "bootstrap")
WRAPPER = """
import json, runpy, sys, time
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
stamps = []
register_optimizer_step_post_hook(lambda *a: stamps.append(time.perf_counter()))
out, sys.argv = sys.argv[1], ["trainers.ddp", *sys.argv[2:]]
try:
    runpy.run_module("trainers.ddp", run_name="__main__")
except SystemExit:
    pass
with open(out, "w") as fh:
    json.dump(stamps, fh)
"""


def one_run(with_telemetry: bool, steps: int, tmp: Path, index: int) -> list[float]:
    out = tmp / f"stamps-{index}-{with_telemetry}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GPUMON_RUN_DIR", "RANK", "WORLD_SIZE")}
    if with_telemetry:
        env["GPUMON_RUN_DIR"] = str(tmp / f"run-{index}")
        env["PYTHONPATH"] = BOOTSTRAP + os.pathsep + env.get("PYTHONPATH", "")
    args = ["--epochs", "100", "--max-steps", str(steps), "--log-every", "1000000"]
    args += ["--checkpoint-dir", str(tmp / f"ckpt-{index}-{with_telemetry}")]
    subprocess.run([sys.executable, "-c", WRAPPER, str(out), *args], env=env, check=True, stdout=subprocess.DEVNULL)
    stamps = json.loads(out.read_text())
    if with_telemetry:
        events = sum(len(p.read_text().splitlines()) for p in (tmp / f"run-{index}" / "events").iterdir())
        assert events >= steps, f"expected a step event per step, got {events} events"
    return [b - a for a, b in itertools.pairwise(stamps)]


def hook_cost(calls: int = 20000) -> float:
    import torch

    os.environ["GPUMON_RUN_DIR"] = tempfile.mkdtemp(prefix="gpumon-bench-")
    from gpumon.telemetry.autohooks import StepRecorder

    recorder = StepRecorder(torch)
    optimizer = object()
    recorder(optimizer, (), {})
    started = time.perf_counter()
    for _ in range(calls):
        recorder(optimizer, (), {})
    return (time.perf_counter() - started) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}  load: {os.getloadavg()[0]:.2f}")
    medians: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="gpumon-bench-") as tmp:
        for index in range(args.repeats):
            for arm in (False, True):
                steps = one_run(arm, args.steps, Path(tmp), index)[args.warmup :]
                medians[arm].append(statistics.median(steps))
    off = statistics.median(medians[False])
    on = statistics.median(medians[True])
    ratio = on / off
    print(f"step time without telemetry: {off * 1e3:.3f} ms (median of {args.repeats} run medians)")
    print(f"step time with telemetry:    {on * 1e3:.3f} ms")
    print(f"ratio: {ratio:.4f}  goal <= {GOAL}  {'met' if ratio <= GOAL else 'MISSED'}")
    cost = hook_cost()
    print(f"bootstrap step hook alone: {cost:.1f} µs per step = {cost / (off * 1e6) * 100:.2f}% of a step here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
