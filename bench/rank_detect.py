"""Per-step cost of the bootstrap's hooks with rank detection and the backward-root loss, vs before them.

"before" is ``gpumon/telemetry/autohooks.py`` as it was at commit ``BASE`` (read with ``git show``):
its optimizer post-hook plus its backward counter. "now" is today's ``StepRecorder``: the same hook,
plus becoming a rank at the first step (rank claim, ``proc_start``), the pid check that keeps a forked
child's steps its own, the backward root kept (``detach()``) at every backward, the process-group
check and the loss read (``.item()``) at every recorded step, and its ``metrics`` event. Both arms
run in this process, alternating, on a real 0-d loss tensor; each call pair is one training step's
worth of hook work. Two step rates: the default (200 recorded steps a second: most steps only count)
and 0 (every step recorded: the worst case, a step event and a loss event written per step).
Goal: "now" within 15 µs a step of "before".

With CUDA (``--cuda``): a real step on the GPU under ``torch.cuda.set_sync_debug_mode("error")``,
which raises on any synchronising call: the hooks must add none.

Usage: python bench/rank_detect.py [--calls 20000] [--repeats 5] [--cuda]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

BASE = "3ec5250"  # the last commit before ranks were detected at the first step
GOAL_US = 15.0
ROOT = Path(__file__).resolve().parents[1]


def before_module() -> ModuleType:
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{BASE}:gpumon/telemetry/autohooks.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="gpumon-bench-")) / "autohooks_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("autohooks_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_step_us(step: Any, calls: int) -> float:
    step()  # the first step opens the event file
    started = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - started) / calls * 1e6


def arms(torch: Any, before: ModuleType, rate: int) -> dict[str, Any]:
    from gpumon.telemetry.steps import StepRecorder

    os.environ["GPUMON_STEP_RATE"] = str(rate)
    model = torch.nn.Linear(4, 1)
    loss = model(torch.randn(2, 4)).pow(2).mean()  # a real 0-d loss with a graph
    optimizer = object()
    old = before.StepRecorder(torch)
    new = StepRecorder(torch)
    args = (loss,)
    kwargs: dict[str, Any] = {}

    def step_before() -> None:
        old.backward()
        old(optimizer, (), {})

    def step_now() -> None:
        new.backward(args, kwargs)
        new(optimizer, (), {})

    return {"before": step_before, "now": step_now}


def cuda_check(torch: Any) -> str:
    """A real training step on the GPU with the hooks, under sync debug mode "error"."""
    from gpumon.telemetry import autohooks

    autohooks._on_torch(torch)
    model = torch.nn.Linear(256, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(64, 256, device="cuda")
    for _ in range(3):  # warm-up: lazy inits may sync once
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(200):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return "200 CUDA steps with the hooks under set_sync_debug_mode('error'): no synchronisation"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cuda", action="store_true", help="also check that the hooks add no CUDA sync")
    args = parser.parse_args()
    os.environ["GPUMON_RUN_DIR"] = tempfile.mkdtemp(prefix="gpumon-bench-run-")
    os.environ.pop("RANK", None)
    import torch

    torch.set_num_threads(1)
    before = before_module()
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"torch {torch.__version__}; date: {time.strftime('%Y-%m-%d %H:%M')}  load: {os.getloadavg()[0]:.2f}")
    print(f"before = autohooks.py at {BASE}; {args.calls} steps x {args.repeats} alternating repeats, medians")
    worst = 0.0
    for rate in (200, 0):
        steps = arms(torch, before, rate)
        times: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(args.repeats):
            for name, step in steps.items():
                times[name].append(per_step_us(step, args.calls))
        old, new = statistics.median(times["before"]), statistics.median(times["now"])
        worst = max(worst, new - old)
        label = "default rate (200 recorded/s)" if rate else "every step recorded (rate 0)"
        print(f"{label:32} before {old:6.2f} µs/step   now {new:6.2f} µs/step   added {new - old:+6.2f} µs")
    print(f"worst added cost: {worst:+.2f} µs/step  goal <= {GOAL_US} µs  {'met' if worst <= GOAL_US else 'MISSED'}")
    if args.cuda:
        print(cuda_check(torch) if torch.cuda.is_available() else "--cuda: no CUDA device here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
