"""GPU truth: gpumon beside nvidia-smi and nvitop on a real GPU, and what gpumon costs there.

    python bench/gpu_check.py [--idle-seconds 20] [--skip-runs]

1. The same fields read in the same second by gpumon (NVML), nvidia-smi and nvitop (if installed),
   with gpumon checked against nvidia-smi within the tolerances of gpumon/core/gpu/crosscheck.py.
2. NVML sample cost per GPU per tick; ``gpumon snapshot --json`` wall time beside ``nvitop --once``
   and ``nvidia-smi``; the app's idle CPU in tmux beside nvitop's.
3. The telemetry hook's cost per step on CUDA, with and without the host heap.
4. The leak detector's latency on CUDA: the two leak examples launched through gpumon.
5. SM activity (NVML GPM) of a busy matmul loop and of a single-thread spin kernel, beside
   ``nvidia-smi dmon --gpm-metrics`` read over the same second (issue 37).

Exits 1 on any mismatch, 2 at once where no GPU is visible (with the reason).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from startup import HarnessError, Pane, gpu0_util_shown, gpumon_command, median_wall, tmux_server  # noqa: E402

from gpumon.core.gpu.crosscheck import GPU_FIELDS, compare_device, run_smi  # noqa: E402
from gpumon.core.gpu.nvml import NvmlSource, NvmlUnavailable  # noqa: E402

HAS_NVITOP = importlib.util.find_spec("nvitop") is not None


def section(title: str) -> None:
    print(f"\n== {title}")


def nvitop_row(index: int) -> dict[str, Any] | None:
    if not HAS_NVITOP:
        return None
    from nvitop import Device

    d = Device(index)

    def num(value: Any) -> Any:
        return None if value in (None, "N/A") or not isinstance(value, int | float) else value

    mem_used = num(d.memory_used())
    power = num(d.power_usage())
    limit = num(d.power_limit())
    pstate = d.performance_state()
    return {
        "memory.used": None if mem_used is None else round(mem_used / 2**20, 1),
        "memory.total": round(d.memory_total() / 2**20, 1),
        "utilization.gpu": num(d.gpu_utilization()),
        "temperature.gpu": num(d.temperature()),
        "power.draw": None if power is None else power / 1000,
        "enforced.power.limit": None if limit is None else limit / 1000,
        "clocks.sm": num(d.sm_clock()),
        "clocks.mem": num(d.memory_clock()),
        "pstate": int(pstate[1:]) if isinstance(pstate, str) and pstate[1:].isdigit() else None,
    }


def compare(source: NvmlSource) -> int:
    section("same-second readings: gpumon vs nvidia-smi vs nvitop")
    started = time.time()
    ours = source.sample()
    theirs = run_smi(k for k, _ in GPU_FIELDS)
    others = [nvitop_row(d.index) for d in ours.devices]
    print(f"read within {time.time() - started:.2f} s; nvitop {'installed' if HAS_NVITOP else 'not installed'}")
    mismatches = 0
    for dev, row, other in zip(ours.devices, theirs, others, strict=True):
        for check in compare_device(asdict(dev), row):
            key = check.what.split()[-1]
            seen = "" if other is None or key not in other else f"  nvitop {other[key]}"
            print(check.line() + seen)
            mismatches += not check.ok
    return mismatches


def costs(source: NvmlSource) -> None:
    section("sampling cost")
    for _ in range(5):
        source.sample()
    rounds = 200
    started = time.perf_counter()
    for _ in range(rounds):
        source.sample()
    per_tick = (time.perf_counter() - started) / rounds
    print(f"NVML sample (all fields + processes): {per_tick * 1e3:.2f} ms per tick, "
          f"{per_tick * 1e3 / source.count:.2f} ms per GPU ({source.count} GPU)")  # fmt: skip
    section("one-shot wall time (median of 5)")
    for label, argv in (
        ("gpumon snapshot --json", [sys.executable, "-m", "gpumon", "snapshot", "--json"]),
        ("nvitop --once", [sys.executable, "-m", "nvitop", "--once"] if HAS_NVITOP else None),
        ("nvidia-smi", ["nvidia-smi"]),
    ):
        try:
            took = f"{median_wall(argv, 5) * 1e3:.0f} ms" if argv else "not installed"
        except HarnessError as err:
            took = f"failed: {err}"
        print(f"  {label:24} {took}")


def idle_cpu(seconds: float) -> None:
    section(f"idle CPU in tmux 200x50, {seconds:g} s after the first frame and 5 s warm-up")
    apps = {"gpumon": ([gpumon_command()], gpu0_util_shown)}
    if HAS_NVITOP:
        apps["nvitop"] = ([sys.executable, "-m", "nvitop"], lambda screen: "NVITOP" in screen)
    try:
        with tmux_server() as server:
            for label, (argv, drawn) in apps.items():
                pane = Pane(server, f"idle-{label}", 200, 50, argv)
                try:
                    pane.start()
                    pane.wait_frame(drawn)
                    time.sleep(5)
                    proc = pane.app_process(label)
                    t0, w0 = sum(proc.cpu_times()[:2]), time.perf_counter()
                    time.sleep(seconds)
                    t1, w1 = sum(proc.cpu_times()[:2]), time.perf_counter()
                    print(f"  {label:8} {(t1 - t0) / (w1 - w0) * 100:.2f}% of one core")
                finally:
                    pane.kill()
    except HarnessError as err:
        print(f"  skipped: {err}")


def hook_cost() -> None:
    section("telemetry hook per optimizer step on CUDA (median of 2000 calls)")
    import torch

    from gpumon import telemetry
    from gpumon.telemetry.autohooks import StepRecorder

    torch.zeros(1, device="cuda")
    with tempfile.TemporaryDirectory() as run_dir:
        telemetry.configure(run_dir, "rank0")
        try:
            for label, heap in (("with the host heap", True), ("without it", False)):
                recorder = StepRecorder(torch)
                recorder.census = None
                if not heap:
                    recorder.mallinfo2 = None
                times = []
                for _ in range(2000):
                    started = time.perf_counter_ns()
                    recorder(recorder, (), {})
                    times.append(time.perf_counter_ns() - started)
                print(f"  {label:20} {statistics.median(times) / 1e3:.1f} us")
        finally:
            telemetry.configure(None)


def leak_latency() -> int:
    section("leak detector on CUDA: the examples launched through gpumon (500 steps, 2 ms each)")
    from gpumon.core.doctor.leak import LeakWatch
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, wait

    os.environ["GPUMON_HOME"] = tempfile.mkdtemp(prefix="gpu-check-")
    store = RunStore()
    examples = REPO / "trainers" / "examples"
    cases = {  # example -> the memory that must warn, and the one that must not
        "leak_outputs_list.py": ("gpu", None),
        "leak_loss_graph.py": ("host", "gpu"),
        "leak_outputs_list.py --fixed": (None, None),
        "leak_loss_graph.py --fixed": (None, None),
    }
    args = ("--device", "cuda", "--steps", "500", "--step-ms", "2")
    records = {}
    for case in cases:
        name, *extra = case.split()
        spec = RunSpec(kind="script", program=str(examples / name), args=(*args, *extra))
        records[case] = launch(spec, store, 1)
    bad = 0
    warmup = 20
    for case, (warns, quiet) in cases.items():
        record = wait(records[case], store, 300)
        tele = RunTelemetry(record.dir)
        tele.update()
        watch = LeakWatch()
        watch.update(tele)
        states = watch.series_states()
        detectors = watch.detectors
        words = []
        for (_, memory), state in states.items():
            first = next((s for s, st in detectors[0, memory].transitions if st == "leak"), None)
            after = "" if first is None else f", leak at step {first} ({first - warmup} after warm-up)"
            words.append(f"{memory}: {state.state}{after}")
        ok = record.state == "finished"
        ok &= warns is None or states[0, warns].state == "leak"
        ok &= quiet is None or not states[0, quiet].warning
        ok &= warns is not None or not any(s.warning for s in states.values())
        bad += not ok
        print(f"  {'ok ' if ok else 'BAD'} {case:30} {'; '.join(words)}")
    return bad


def _dmon_gpm() -> dict[str, float]:
    """``nvidia-smi dmon --gpm-metrics 2,3,5,10 -c 1 -i 0`` (SM activity, SM occupancy, tensor, DRAM activity, in
    percent), parsed by its header's column names; {} where this nvidia-smi has no GPM metrics."""
    import subprocess

    out = subprocess.run(
        ["nvidia-smi", "dmon", "--gpm-metrics", "2,3,5,10", "-c", "1", "-i", "0"], capture_output=True, text=True
    )
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    header = next((line.lstrip("#").split() for line in lines if line.startswith("#")), [])
    data = next((line.split() for line in lines if not line.startswith("#")), [])
    values: dict[str, float] = {}
    for name, value in zip(header, data, strict=False):
        try:
            values[name] = float(value)
        except ValueError:
            continue
    if not values:
        print(f"  nvidia-smi dmon --gpm-metrics: {out.stdout.strip() or out.stderr.strip()}")
    return values


def gpm_check(source: NvmlSource) -> int:
    """SM activity of a busy matmul loop and of a single-thread spin kernel (both 100% utilisation), gpumon's
    GPM reading beside nvidia-smi dmon's, read over the same second."""
    import subprocess
    import threading

    section("SM activity (GPM): gpumon vs nvidia-smi dmon --gpm-metrics, same second")
    script = REPO / "tests" / "data" / "scripts" / "gpu_use.py"
    bad = 0
    for mode in ("busy", "trickle"):
        proc = subprocess.Popen([sys.executable, str(script), mode, "20"])
        try:
            time.sleep(6)
            theirs: dict[str, float] = {}
            thread = threading.Thread(target=lambda into=theirs: into.update(_dmon_gpm()))
            source.sample()  # GPM's first sample of the window
            thread.start()
            time.sleep(1.0)
            dev = source.sample().devices[0]
            thread.join()
        finally:
            proc.kill()
            proc.wait()
        ours = {k: getattr(dev, k) for k in ("sm_active", "sm_occupancy", "tensor_active", "dram_active")}
        shown = "  ".join(f"{k} {'N/A' if v is None else f'{v * 100:.1f}%'}" for k, v in ours.items())
        print(f"  {mode:8} util {dev.gpu_util}%  gpumon: {shown}  (na: {dev.na.get('sm_active', '')})")
        print(f"  {'':8} nvidia-smi dmon: {theirs}")
        sm = next((v for k, v in theirs.items() if k.lower().startswith("sm") and "occ" not in k.lower()), None)
        if sm is not None and dev.sm_active is not None and abs(dev.sm_active * 100 - sm) > 10:
            print(f"  MISMATCH: SM activity gpumon {dev.sm_active * 100:.1f}% vs dmon {sm}%")
            bad += 1
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--skip-runs", action="store_true", help="no torch work: readings and sampling costs only")
    args = parser.parse_args()
    try:
        source = NvmlSource()
    except NvmlUnavailable as err:
        print(f"gpu_check: no GPU here ({err}); run it on a machine whose NVIDIA driver sees a GPU", file=sys.stderr)
        return 2
    if shutil.which("nvidia-smi") is None:
        print("gpu_check: nvidia-smi not on PATH: nothing to compare with", file=sys.stderr)
        return 2
    info = run_smi(["name", "driver_version"])[0]
    import pynvml

    cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
    print(f"{info['name']} x{source.count}, driver {info['driver_version']}, CUDA {cuda // 1000}.{cuda % 1000 // 10}")
    mismatches = compare(source)
    if not args.skip_runs:
        mismatches += gpm_check(source)
    costs(source)
    idle_cpu(args.idle_seconds)
    if not args.skip_runs:
        hook_cost()
        mismatches += leak_latency()
    source.close()
    print(f"\n{'all readings agree' if not mismatches else f'{mismatches} MISMATCH(ES)'}")
    print(json.dumps({"mismatches": mismatches}))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
