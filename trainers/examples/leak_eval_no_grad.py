"""Leak: evaluation without torch.no_grad(), its losses kept: every kept loss holds its activations.

val_losses.append(loss_fn(model(x), y))                  # the bug: a graph with saved activations
with torch.no_grad():                                    # --fixed: no graph,
    val_losses.append(loss_fn(model(x), y).item())       #          and a float, not a tensor

gpumon launch script trainers/examples/leak_eval_no_grad.py -- --steps 300
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=5, help="steps between evaluations")
    parser.add_argument("--eval-batches", type=int, default=4)
    parser.add_argument("--step-ms", type=float, default=0.0, help="sleep per step, to look like a slower model")
    parser.add_argument("--fixed", action="store_true", help="the healthy twin")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    val_losses: list[torch.Tensor | float] = []
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, 64, device=args.device)
        y = torch.randint(0, 10, (args.batch,), device=args.device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.eval_every == 0:
            model.eval()
            with torch.no_grad() if args.fixed else contextlib.nullcontext():
                for _ in range(args.eval_batches):
                    xv = torch.randn(256, 64, device=args.device)
                    yv = torch.randint(0, 10, (256,), device=args.device)
                    val_loss = loss_fn(model(xv), yv)
                    val_losses.append(val_loss.item() if args.fixed else val_loss)  # the leak: a tensor
            model.train()
        time.sleep(args.step_ms / 1000)
    print(f"mean validation loss {sum(float(v) for v in val_losses) / max(1, len(val_losses)):.4f}")


if __name__ == "__main__":
    main()
