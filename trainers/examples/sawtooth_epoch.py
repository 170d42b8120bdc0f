"""Not a leak: each epoch keeps its batches' outputs for an epoch metric, then drops them (a sawtooth).

    epoch_outputs.append(logits.detach())   # grows within the epoch
    epoch_outputs = []                      # ...and is freed at its end: the peaks stay flat

Memory climbs for a whole epoch; a slope fitted within it would project a crash that never
comes. gpumon reports the growth per cycle and the peak, and projects from the peaks.

    gpumon launch script trainers/examples/sawtooth_epoch.py -- --epochs 6 --steps-per-epoch 100
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--step-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 100))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    for epoch in range(args.epochs):
        epoch_outputs: list[torch.Tensor] = []
        for _ in range(args.steps_per_epoch):
            x = torch.randn(args.batch, 32)
            logits = model(x)
            loss = logits.pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_outputs.append(logits.detach())
            time.sleep(args.step_ms / 1000)
        spread = torch.cat(epoch_outputs).std().item()
        print(f"epoch {epoch}: output spread {spread:.3f}")


if __name__ == "__main__":
    main()
