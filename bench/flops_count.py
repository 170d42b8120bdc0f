"""The cost of gpumon's one counted step (telemetry/flops.py), against the same model's plain step.

    python bench/flops_count.py [mlp|cnn|transformer]

Prints the import of torch.utils.flop_counter (paid once, in the counted step), the counted step and the
median plain step, and the per-step cost of the hook when no count is due.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "data" / "scripts"))

import torch
from flops_models import batches, build, loss_of

from gpumon.telemetry.flops import FlopCount


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    model = build(kind)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = batches(kind)

    def step() -> None:
        loss = loss_of(kind, model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    plain = []
    for _ in range(50):
        t = time.perf_counter()
        step()
        plain.append(time.perf_counter() - t)
    t = time.perf_counter()
    import importlib

    importlib.import_module("torch.utils.flop_counter")

    imported = time.perf_counter() - t
    count, events = FlopCount(torch), []
    count.due = 0
    count.tick(0, opt, lambda kind, **f: events.append(f))  # enters
    t = time.perf_counter()
    step()
    count.tick(1, opt, lambda kind, **f: events.append(f))  # leaves, writes
    counted = time.perf_counter() - t
    idle = FlopCount(torch)
    idle.due = None
    t = time.perf_counter()
    for i in range(100_000):
        idle.tick(i, opt, None)
    hook_ns = (time.perf_counter() - t) / 100_000 * 1e9
    median = statistics.median(plain)
    print(
        f"{kind}: plain step {median * 1e3:.2f} ms (median of 50); counted step {counted * 1e3:.1f} ms "
        f"({counted / median:.1f}x); flop_counter import {imported * 1e3:.0f} ms (once); "
        f"idle hook {hook_ns:.0f} ns/step; {events[0]['flops']:,} FLOPs/step"
    )


if __name__ == "__main__":
    main()
