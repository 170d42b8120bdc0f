"""Pipeline-parallel speed-up: 2 stages in 2 CPU processes, 8 micro-batches against 1.

Runs ``trainers.model_parallel --mode pipeline`` under torchrun (``--standalone
--nproc-per-node 2``, gloo, OMP_NUM_THREADS=1 so each stage owns one core) on an
MLP of --depth Linear(--width)+ReLU layers, 4 per stage, over synthetic batches
of --batch-size. Each run prints the median step time of its steps after the
first two; the speed-up is the 1-micro-batch median over the 8-micro-batch one,
with the same total batch. Runs alternate (1, 8, 1, 8, ...) for --rounds so
drift on a noisy machine hits both sides; the median of each side's runs counts.

GPipe's bound for p stages and m micro-batches is p*m/(m+p-1): 1.78x for p=2,
m=8, reached only if sending activations costs nothing.

Both stages must own a core: anything else running on a 2-core machine lands in
the overlapped part and shrinks the speed-up. Each run takes ~10-15 s.

Usage: python bench/pipeline.py [--batch-size 4096] [--width 512] [--steps 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL = 1.5
STAGES = 2
STEP_LINE = re.compile(r"step time median ([\d.]+) ms over (\d+) steps")


class HarnessError(Exception):
    pass


def command(args: argparse.Namespace, micro_batches: int) -> list[str]:
    # Schedule1F1B refuses fewer micro-batches than stages; with one micro-batch every schedule is sequential.
    schedule = args.schedule if micro_batches > 1 else "gpipe"
    features = args.width  # 2 channels of 16x16 when width is 512: the first layer is as big as the rest
    channels, side = (2, 16) if features == 512 else (1, int(features**0.5))
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(STAGES)),
        *("-m", "trainers.model_parallel", "--mode", "pipeline", "--schedule", schedule),
        *("--arch", "mlp", "--width", str(args.width), "--depth", str(args.depth)),
        *("--data", "synthetic", "--samples", str(args.batch_size * 4), "--val-fraction", "0"),
        *("--channels", str(channels), "--image-size", str(side), "--classes", "10"),
        *("--batch-size", str(args.batch_size), "--micro-batches", str(micro_batches)),
        *("--max-steps", str(args.steps), "--epochs", "1000", "--no-checkpoint", "--log-every", "1000000"),
    ]


def one(args: argparse.Namespace, micro_batches: int) -> float:
    """Median step time in seconds of one torchrun job."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("GPUMON_RUN_DIR", None)
    done = subprocess.run(command(args, micro_batches), capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    found = STEP_LINE.search(done.stdout)
    if done.returncode != 0 or not found:
        raise HarnessError(f"micro-batches {micro_batches}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return float(found.group(1)) / 1000


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch  # only for its version; the timed work runs in torchrun's processes

    python = platform.python_version()
    return f"{platform.node()}: {os.cpu_count()} CPUs ({model}), Python {python}, torch {torch.__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=4096, help="total batch, the same for 1 and 8 micro-batches")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=8, help="hidden layers in all, half per stage")
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe")
    parser.add_argument("--steps", type=int, default=20, help="steps per run; the first 2 are not timed")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setting, alternating")
    args = parser.parse_args(argv)
    if min(args.batch_size, args.width, args.steps - 2, args.rounds, args.micro_batches) < 1:
        parser.error("sizes must be positive and --steps at least 3")
    if args.batch_size % args.micro_batches:
        parser.error("--batch-size must be a multiple of --micro-batches")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    times: dict[int, list[float]] = {1: [], args.micro_batches: []}
    try:
        for _ in range(args.rounds):
            for m in times:
                times[m].append(one(args, m))
                print(f"  {m} micro-batch(es): {1000 * times[m][-1]:.1f} ms/step", flush=True)
    except (HarnessError, OSError, subprocess.SubprocessError) as err:
        print(f"pipeline bench failed: {err}", file=sys.stderr)
        return 1
    m = args.micro_batches
    base, piped = statistics.median(times[1]), statistics.median(times[m])
    speedup = base / piped
    paired = ", ".join(f"{a / b:.2f}" for a, b in zip(times[1], times[m], strict=True))
    bound = STAGES * m / (m + STAGES - 1)
    shown = shlex.join(["python", "bench/pipeline.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"machine: {machine()}")
    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"command: {shown}")
    print(f"  each run: {shlex.join(command(args, m)[1:])}")
    print(
        f"result: {args.schedule}, {STAGES} stages, batch {args.batch_size}, mlp {args.depth}x{args.width}: "
        f"1 micro-batch {1000 * base:.1f} ms/step, {m} micro-batches {1000 * piped:.1f} ms/step, "
        f"speed-up {speedup:.2f}x (per round {paired}; GPipe bound {bound:.2f}x; "
        f"goal >= {GOAL}x: {'met' if speedup >= GOAL else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
