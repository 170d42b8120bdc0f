"""Leak released at each epoch's end: the running loss is summed as a tensor and reset per epoch.

The shape of BatsResearch/labelmodels#4 (its `_do_estimate_label_model`, fixed in 3801b62):

    running_loss = 0.0                    # at each epoch's start
    running_loss += loss                  # the bug: every step's autograd graph is kept...
    epoch_loss = running_loss / n         # ...and this one keeps the last epoch's until the next
    running_loss += loss.item()           # --fixed: a Python float

Memory climbs through each epoch and falls at its end (a sawtooth): a crash projected from one
epoch's slope never comes unless an epoch gets long enough.

    gpumon launch script trainers/examples/leak_epoch_loss.py -- --epochs 6 --batches 150
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batches", type=int, default=150, help="steps per epoch")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--step-ms", type=float, default=0.0, help="sleep per step, to look like a slower model")
    parser.add_argument("--fixed", action="store_true", help="the healthy twin")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = [(torch.randn(args.batch, 16), torch.randint(0, 2, (args.batch,))) for _ in range(args.batches)]
    for epoch in range(args.epochs):
        running_loss: torch.Tensor | float = 0.0
        for x, y in batches:
            optimizer.zero_grad()
            log_likelihood = torch.log_softmax(model(x), dim=1).gather(1, y[:, None]).squeeze(1)
            loss = -1 * torch.mean(log_likelihood)
            for p in model.parameters():  # a regulariser per parameter: a graph of a few dozen nodes a step
                loss = loss + 1e-4 * p.pow(2).sum()
            loss.backward()
            optimizer.step()
            if args.fixed:
                running_loss += loss.item()
            else:
                running_loss += loss  # the leak
            time.sleep(args.step_ms / 1000)
        epoch_loss = running_loss / len(batches)
        value = epoch_loss.item() if isinstance(epoch_loss, torch.Tensor) else epoch_loss
        print(f"epoch {epoch + 1}: train loss {value:.6f}", flush=True)


if __name__ == "__main__":
    main()
