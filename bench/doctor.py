"""The leak doctor: detection latency, false alarms, and what the detector and the census cost.

1. Latency: each leak example of trainers/examples runs for real under the bootstrap
   (CPU, ``--steps`` steps); the detector replays its heap series; the figure is the
   first step in state "leak" (and "growing") minus the warm-up. Then synthetic
   series: a slow leak under noise, and staircases (a leak at each evaluation).
2. False alarms: the healthy twins (``--fixed``) and ``healthy_noisy.py`` with
   ``--seeds`` seeds, 500 steps each; a run that ever leaves "ok" is a false alarm.
   Also 200 synthetic healthy series (noise, sawtooth, jumps) of 2000 samples.
3. Detector cost per sample (µs), on a noisy flat series and on a leaking one.
4. Census cost (ms) in this process with N extra live tensors, and with a kept graph.
5. The step hook's cost with the census trigger idle vs without it (µs per step).

Usage: python bench/doctor.py [--steps 300] [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpumon.core.doctor.leak import LeakDetector, analyse_series
from gpumon.core.events import EventReader

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "trainers" / "examples"
BOOTSTRAP = str(ROOT / "gpumon" / "telemetry" / "bootstrap")
LEAKS = ("leak_loss_graph.py", "leak_eval_no_grad.py", "leak_outputs_list.py")
GOAL_US = 50.0


def heap_series(args: list[str], run_dir: Path) -> tuple[list[int], list[float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMON_", "RANK", "WORLD_SIZE"))}
    env.update(GPUMON_RUN_DIR=str(run_dir), PYTHONPATH=BOOTSTRAP, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-W", "ignore", *args]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    steps = [e for e in list(EventReader(run_dir).each()) if e["type"] == "step"]
    return [e["step"] for e in steps], [float(e["heap"]) for e in steps]


def run_all(jobs: list[list[str]], tmp: Path) -> list[tuple[list[int], list[float]]]:
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(lambda ij: heap_series(ij[1], tmp / f"run{ij[0]}"), enumerate(jobs)))


def first(detector: LeakDetector, state: str) -> int | None:
    return next((step for step, s in detector.transitions if s == state), None)


def synthetic_false_alarms(runs: int = 200, samples: int = 2000) -> int:
    alarms = 0
    for seed in range(runs):
        rng = random.Random(seed)
        kind = seed % 4
        values = []
        for s in range(samples):
            v = 120e6 + rng.gauss(0, [200, 10_000, 0, 2_000][kind])
            v += (s % 7) * 3000 if kind == 2 else 0
            v += sum(4096 for jump in (300, 320, 900) if s > jump) if kind == 3 else 0
            values.append(v)
        detector = analyse_series(list(range(1, samples + 1)), values, 16 << 30)
        alarms += any(state != "ok" for _, state in detector.transitions)
    return alarms


def detector_cost(samples: int = 20_000) -> tuple[float, float]:
    rng = random.Random(0)
    costs = []
    for slope in (0.0, 5600.0):
        detector = LeakDetector(16 << 30)
        values = [120e6 + slope * s + rng.gauss(0, 1000) for s in range(samples)]
        started = time.perf_counter()
        for step, value in enumerate(values, 1):
            detector.add(step, value)
        costs.append((time.perf_counter() - started) / samples * 1e6)
    return costs[0], costs[1]


def census_costs() -> list[tuple[str, int, float]]:
    import gc

    import torch

    from gpumon.telemetry.census import take_census

    rows = []
    for n in (0, 1_000, 10_000, 100_000):
        kept = [torch.zeros(4) for _ in range(n)]
        times = []
        for _ in range(3):
            started = time.perf_counter()
            take_census(torch)
            times.append((time.perf_counter() - started) * 1e3)
        rows.append((f"{n:,} extra tensors", len(gc.get_objects()), min(times)))
        del kept
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    total = torch.zeros(())
    for _ in range(1000):  # total += loss: a graph of ~8k nodes
        loss = model(torch.randn(32, 64)).pow(2).mean()
        loss.backward()
        total = total + loss
    started = time.perf_counter()
    census = take_census(torch)
    rows.append(
        (f"a kept graph of {census['nodes']:,} nodes", len(gc.get_objects()), (time.perf_counter() - started) * 1e3)
    )
    return rows


def hook_costs(calls: int = 20_000) -> tuple[float, float]:
    import torch

    os.environ["GPUMON_RUN_DIR"] = tempfile.mkdtemp(prefix="gpumon-bench-")
    from gpumon.telemetry.autohooks import StepRecorder

    out = []
    for with_trigger in (False, True):
        recorder = StepRecorder(torch)
        if not with_trigger:
            recorder.census = None
        optimizer = object()
        recorder(optimizer, (), {})
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            for _ in range(calls):
                recorder(optimizer, (), {})
            best = min(best, (time.perf_counter() - started) / calls * 1e6)
        out.append(best)
    return out[0], out[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}  load: {os.getloadavg()[0]:.2f}")
    warmup = LeakDetector().warmup
    with tempfile.TemporaryDirectory(prefix="gpumon-bench-") as tmp_name:
        tmp = Path(tmp_name)
        leak_jobs = [[str(EXAMPLES / name), "--steps", str(args.steps)] for name in LEAKS]
        healthy_jobs = [[str(EXAMPLES / name), "--fixed", "--steps", "500"] for name in LEAKS]
        healthy_jobs += [[str(EXAMPLES / "healthy_noisy.py"), "--seed", str(s)] for s in range(args.seeds)]
        started = time.perf_counter()
        series = run_all(leak_jobs + healthy_jobs, tmp)
        wall = time.perf_counter() - started
    print(f"\n{len(series)} example runs in {wall:.0f} s; detector: warm-up {warmup} steps, window 50\n")
    print(f"{'pattern':<24} {'heap B/iter':>12} {'growing at':>11} {'leak at':>8} {'after warm-up':>14}")
    for name, (steps, values) in zip(LEAKS, series, strict=False):
        detector = analyse_series(steps, values, 16 << 30)
        growing, leak = first(detector, "growing"), first(detector, "leak")
        latency = "missed" if leak is None else f"{leak - warmup} iter"
        print(f"{name:<24} {detector.state.slope:>12,.0f} {growing or '-':>11} {leak or '-':>8} {latency:>14}")
    rng = random.Random(0)
    synthetic = {
        "200 B/iter, 1 KB noise": lambda s: 200 * s + rng.gauss(0, 1000),
        "870 KB every 10 steps": lambda s: 870_000 * (s // 10),
        "870 KB every 100 steps": lambda s: 870_000 * (s // 100),
        "870 KB every 1000 steps": lambda s: 870_000 * (s // 1000),
    }
    for label, grow in synthetic.items():
        detector = analyse_series(list(range(1, 20_001)), [120e6 + grow(s) for s in range(1, 20_001)], 16 << 30)
        growing, leak = first(detector, "growing"), first(detector, "leak")
        latency = "missed" if leak is None else f"{leak - warmup} iter"
        print(f"{label:<24} {detector.state.slope:>12,.0f} {growing or '-':>11} {leak or '-':>8} {latency:>14}")
    alarms = []
    for job, (steps, values) in zip(healthy_jobs, series[len(LEAKS) :], strict=True):
        detector = analyse_series(steps, values, 16 << 30)
        if any(state != "ok" for _, state in detector.transitions):
            alarms.append(f"{Path(job[0]).name} {' '.join(job[1:])}: {detector.transitions}")
    print(f"\nfalse alarms: {len(alarms)} of {len(healthy_jobs)} healthy runs of 500 steps")
    for alarm in alarms:
        print(f"  {alarm}")
    print(f"false alarms: {synthetic_false_alarms()} of 200 synthetic healthy series of 2000 samples")
    flat, leaking = detector_cost()
    print(f"\ndetector per sample: {flat:.1f} µs (flat, noisy), {leaking:.1f} µs (leaking)  goal < {GOAL_US:.0f} µs")
    print(f"  {'met' if max(flat, leaking) < GOAL_US else 'MISSED'}")
    print(f"\n{'census':<32} {'gc objects':>11} {'ms':>8}")
    for label, objects, ms in census_costs():
        print(f"{label:<32} {objects:>11,} {ms:>8.1f}")
    without, with_trigger = hook_costs()
    print(f"\nstep hook: {without:.2f} µs without the census trigger, {with_trigger:.2f} µs with it (idle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
