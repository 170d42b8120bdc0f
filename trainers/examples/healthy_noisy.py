"""Healthy, but memory moves: warm-up growth, a one-off allocation and allocator noise (no leak).

- batch sizes vary every step (16-64), so the live tensors at each step boundary differ in size;
- a per-batch-size cache (a mask here, a positional table or a compiled kernel in real code)
  fills during the first steps, then stays;
- a validation buffer is allocated once, at ``--buffer-at`` (a step jump, not a trend);
- evaluation under torch.no_grad() every 25 steps; the loss history is a list of floats.

A leak doctor must stay quiet here:

    gpumon launch script trainers/examples/healthy_noisy.py -- --steps 500
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from torch import nn

SIZES = (16, 32, 48, 64)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--buffer-at", type=int, default=200, help="step of the one-off allocation")
    parser.add_argument("--step-ms", type=float, default=0.0, help="sleep per step, to look like a slower model")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    masks: dict[int, torch.Tensor] = {}  # warm-up growth: one entry per batch size seen
    buffer: torch.Tensor | None = None
    history: list[float] = []
    for step in range(1, args.steps + 1):
        batch = rng.choice(SIZES)
        if batch not in masks:
            masks[batch] = torch.ones(batch, 64, device=args.device)
        x = torch.randn(batch, 64, device=args.device) * masks[batch]
        y = torch.randint(0, 10, (batch,), device=args.device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step == args.buffer_at:
            buffer = torch.zeros(512, 256, device=args.device)
        if step % 25 == 0:
            xv = torch.randn(256, 64, device=args.device)
            yv = torch.randint(0, 10, (256,), device=args.device)
            with torch.no_grad():
                val = loss_fn(model(xv), yv)
            history.append(val.item())
        time.sleep(args.step_ms / 1000)
    print(f"final loss {history[-1]:.4f}, buffer {'allocated' if buffer is not None else 'never'}")


if __name__ == "__main__":
    main()
