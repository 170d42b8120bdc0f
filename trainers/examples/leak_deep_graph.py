"""Leak: a deep model's loss summed as a tensor inside a library-style epoch loop (a real bug report's shape).

    running_loss += loss            # the bug: keeps every step's whole autograd graph (~2 nodes per layer)
    running_loss += loss.item()     # --fixed: a number

With 1,000 layers that is ~2,000 graph nodes a step: 300 steps keep 600,000 nodes alive, far more
than any census can walk. gpumon still names `running_loss` and this file's line.

    gpumon launch script trainers/examples/leak_deep_graph.py -- --steps 400 --layers 1000
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def train_epoch(model: nn.Module, batches: list[torch.Tensor], optimizer: torch.optim.Optimizer, fixed: bool,
                step_ms: float) -> float:  # fmt: skip
    running_loss: torch.Tensor | float = 0.0
    for x in batches:
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        if fixed:
            running_loss += loss.item()
        else:
            running_loss += loss  # the leak
        time.sleep(step_ms / 1000)
    return float(running_loss) / max(1, len(batches))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--layers", type=int, default=1000)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=0.0, help="sleep per step, to look like a slower model")
    parser.add_argument("--fixed", action="store_true", help="the healthy twin")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(args.width, args.width) for _ in range(args.layers)])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    batches = [torch.randn(4, args.width) for _ in range(args.steps)]
    print(f"mean loss {train_epoch(model, batches, optimizer, args.fixed, args.step_ms):.4f}")


if __name__ == "__main__":
    main()
