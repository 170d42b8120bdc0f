"""Leak: the running loss is summed as a tensor, so it keeps every step's autograd graph alive.

total_loss += loss            # the bug: total_loss holds a graph that grows each step
total_loss += loss.item()     # --fixed: a Python float

gpumon launch script trainers/examples/leak_loss_graph.py -- --steps 300
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--step-ms", type=float, default=0.0, help="sleep per step, to look like a slower model")
    parser.add_argument("--fixed", action="store_true", help="the healthy twin")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    total_loss: torch.Tensor | float = 0.0
    for _ in range(args.steps):
        x = torch.randn(args.batch, 64, device=args.device)
        y = torch.randint(0, 10, (args.batch,), device=args.device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.fixed:
            total_loss += loss.item()
        else:
            total_loss += loss  # the leak
        time.sleep(args.step_ms / 1000)
    mean = total_loss.item() if isinstance(total_loss, torch.Tensor) else total_loss
    print(f"mean loss {mean / max(1, args.steps):.4f}")


if __name__ == "__main__":
    main()
