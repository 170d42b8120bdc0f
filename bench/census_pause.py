"""The census pause on a real leak kept for a long time: what a late census costs the training loop.

For each leak size (autograd nodes kept per step: a model of N/2 Linear layers whose loss is summed
as a tensor, ``running_loss += loss``) and each census step, a fresh process trains until that step
and takes a census inside the optimizer's step hook, where gpumon's bootstrap takes it. Reported: the
pause (ms, wall, the census included), the bytes of the ``census`` event, the nodes alive (autograd's
counter), whether the walk stopped at its budget, and whether the holder was named.

Goal (issue 16): under 500 ms per census at 1,000 steps x 10,000 nodes (10 million nodes alive).

Usage: python bench/census_pause.py [--nodes 2000,10000] [--steps 100,1000]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time

GOAL_MS = 500.0

CHILD = r"""
import json, sys, time, torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from gpumon.telemetry.census import take_census

nodes, at = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(max(1, nodes // 2))])
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
result = {}
step = 0

def hook(*_):
    if step + 1 == at:
        started = time.perf_counter()
        found = take_census(torch)
        result.update(pause_ms=(time.perf_counter() - started) * 1e3, bytes=len(json.dumps(found)),
                      alive=found["autograd_seq"], truncated=found["truncated"],
                      named=[h for g in found["groups"] for h in g.get("holders") or [] if h["name"] == "running_loss"])

register_optimizer_step_post_hook(hook)

def train_epoch(x):
    global step
    running_loss = 0.0
    for step in range(at):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        running_loss += loss
    return running_loss

built = time.perf_counter()
train_epoch(torch.randn(2, 4))
result["build_s"] = time.perf_counter() - built
print(json.dumps(result))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2000,10000")
    parser.add_argument("--steps", default="100,1000")
    args = parser.parse_args()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}")  # fmt: skip
    print(f"{'nodes/step':>10} {'step':>5} {'nodes alive':>12} {'pause ms':>9} {'event B':>8} {'walk cut':>8} named")
    for nodes in (int(n) for n in args.nodes.split(",")):
        for at in (int(s) for s in args.steps.split(",")):
            done = subprocess.run([sys.executable, "-c", CHILD, str(nodes), str(at)], capture_output=True, text=True)
            if done.returncode:
                print(f"{nodes:>10} {at:>5} failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            named = r["named"][0] if r["named"] else None
            where = f"running_loss at line {named['line']} ({named['function']})" if named else "NOT NAMED"
            mark = "" if r["pause_ms"] < GOAL_MS else "  over the goal"
            print(f"{nodes:>10} {at:>5} {r['alive']:>12,} {r['pause_ms']:>9.0f} {r['bytes']:>8,} "
                  f"{r['truncated']!s:>8} {where}{mark}")  # fmt: skip


if __name__ == "__main__":
    main()
