"""Per-call cost of the time ledger's hooks (gpumon/telemetry/phases.py, issue 52), in-process, CPU.

Each arm is a fresh interpreter. "with" sets GPUMON_RUN_DIR and puts the hooks in as the bootstrap does after the
script's own ``import torch`` (``phases.hook``); "without" does not. Timed, median of ``--repeats`` runs:
- no_grad: one empty ``with torch.no_grad():`` block (the wrapper: two clock reads, a thread-local counter);
- clip step: one training step of a small MLP with ``clip_grad_norm_`` (a no-grad block inside every step);
- torch.save: one ``torch.save`` of a small state dict to a BytesIO (outside a rank: no event, the wrapper only).

Usage: python bench/ledger_hooks.py [--calls 20000] [--repeats 5]
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
import io, json, os, sys, time
calls, which = int(sys.argv[1]), sys.argv[2]
import torch
torch.set_num_threads(1)
if os.environ.get("GPUMON_RUN_DIR"):
    from gpumon.telemetry import phases
    phases.hook(torch)
if which == "no_grad":
    start = time.perf_counter()
    for _ in range(calls):
        with torch.no_grad():
            pass
    took = time.perf_counter() - start
elif which == "clip":
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    calls //= 10
    start = time.perf_counter()
    for _ in range(calls):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    took = time.perf_counter() - start
else:
    state = torch.nn.Linear(8, 8).state_dict()
    calls //= 20
    start = time.perf_counter()
    for _ in range(calls):
        torch.save(state, io.BytesIO())
    took = time.perf_counter() - start
print(json.dumps({"us": took / calls * 1e6}))
"""


def arm(which: str, calls: int, hooked: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k != "GPUMON_RUN_DIR"}
    with tempfile.TemporaryDirectory() as run_dir:
        if hooked:
            env["GPUMON_RUN_DIR"] = run_dir
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(calls), which], env=env, capture_output=True, text=True, check=True
        )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["us"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    names = {"no_grad": "an empty `with torch.no_grad():`", "clip": "a step with `clip_grad_norm_`",
             "save": "`torch.save` of a small state dict"}  # fmt: skip
    print("| call | without | with the hooks | added |")
    print("| --- | --- | --- | --- |")
    for which, name in names.items():
        without = statistics.median(arm(which, args.calls, False) for _ in range(args.repeats))
        hooked = statistics.median(arm(which, args.calls, True) for _ in range(args.repeats))
        print(f"| {name} | {without:.2f} µs | {hooked:.2f} µs | {hooked - without:+.2f} µs |")


if __name__ == "__main__":
    main()
