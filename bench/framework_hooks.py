"""Per-call cost of the framework hooks (gpumon/telemetry/frameworks/), in-process, CPU.

Each arm is a fresh interpreter. "with" sets GPUMON_RUN_DIR and calls ``frameworks.install()`` before
the framework is imported (what the bootstrap does); "without" does neither. Timed, median of
``--repeats`` runs of ``--calls`` calls each:
- tqdm: one loop iteration of a bar with ``set_postfix(loss=x, refresh=False)`` (output to a StringIO);
- tensorboard: one ``SummaryWriter.add_scalar`` (torch.utils.tensorboard; skipped without tensorboard);
- import: one import of a module no hook watches, through the watcher's finder (``importlib`` re-import).

Usage: python bench/framework_hooks.py [--calls 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import io, json, os, sys, time, importlib
calls, which = int(sys.argv[1]), sys.argv[2]
if os.environ.get("GPUMON_RUN_DIR"):
    from gpumon.telemetry import frameworks
    frameworks.install()
if which == "tqdm":
    from tqdm import tqdm
    bar = tqdm(range(calls), file=io.StringIO(), mininterval=0.1)
    start = time.perf_counter()
    for i in bar:
        bar.set_postfix(loss=1.0 / (i + 1), refresh=False)
    took = time.perf_counter() - start
elif which == "tensorboard":
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(log_dir=sys.argv[3])
    start = time.perf_counter()
    for i in range(calls):
        w.add_scalar("loss", 1.0 / (i + 1), i)
    took = time.perf_counter() - start
    w.close()
else:
    import colorsys
    start = time.perf_counter()
    for _ in range(calls):
        sys.modules.pop("colorsys")
        importlib.import_module("colorsys")
    took = time.perf_counter() - start
print(json.dumps(took / calls * 1e6))
"""


def arm(which: str, with_hooks: bool, calls: int, tmp: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "GPUMON_RUN_DIR"}
    if with_hooks:
        env["GPUMON_RUN_DIR"] = os.path.join(tmp, "run")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(calls), which, os.path.join(tmp, "tb")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    benches = ["tqdm", "import"]
    try:
        import tensorboard  # noqa: F401

        benches.append("tensorboard")
    except ImportError:
        print("tensorboard not installed: add_scalar skipped")
    with tempfile.TemporaryDirectory() as tmp:
        for which in benches:
            calls = args.calls if which != "tensorboard" else args.calls // 10
            without = statistics.median(arm(which, False, calls, tmp) for _ in range(args.repeats))
            with_ = statistics.median(arm(which, True, calls, tmp) for _ in range(args.repeats))
            print(f"{which:12s} without {without:8.2f} µs/call   with {with_:8.2f} µs/call   +{with_ - without:.2f} µs")


if __name__ == "__main__":
    main()
