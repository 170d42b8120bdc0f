"""Leak: every step's outputs are kept in a list on the device, to compute the accuracy at the end.

    outputs.append(logits.detach())                          # the bug: one batch of logits per step, forever
    correct += (logits.argmax(1) == y).sum().item()          # --fixed: reduce each batch to a number

(``logits.detach().cpu()`` frees the GPU but still grows host memory; ``del`` what you no longer need.)

    gpumon launch script trainers/examples/leak_outputs_list.py -- --steps 300
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
    outputs: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    correct = 0
    for _ in range(args.steps):
        x = torch.randn(args.batch, 64, device=args.device)
        y = torch.randint(0, 10, (args.batch,), device=args.device)
        logits = model(x)
        loss = loss_fn(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.fixed:
            correct += int((logits.argmax(1) == y).sum().item())
        else:
            outputs.append(logits.detach())  # the leak
            labels.append(y)
        time.sleep(args.step_ms / 1000)
    if outputs:
        correct = int((torch.cat(outputs).argmax(1) == torch.cat(labels)).sum().item())
    print(f"train accuracy {correct / max(1, args.steps * args.batch):.3f}")


if __name__ == "__main__":
    main()
