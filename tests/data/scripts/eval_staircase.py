"""A leak that grows only at evaluation: every --eval-every steps the loop evaluates WITHOUT torch.no_grad()
and keeps the outputs in a list, each holding its graph's saved activations (~16 MiB): a staircase.

    eval_outputs.append(model(xv))   # the leak: a (2048, 10) output with an AddmmBackward0 graph
    with torch.no_grad():            # --fixed: no graph is kept
        eval_outputs.append(model(xv))

No gpumon code: gpumon launch script tests/data/scripts/eval_staircase.py -- --steps 800
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=800)
parser.add_argument("--eval-every", type=int, default=50)
parser.add_argument("--step-ms", type=float, default=0.0, help="sleep per step, to look like a slower model")
parser.add_argument("--fixed", action="store_true", help="evaluate under torch.no_grad()")
args = parser.parse_args()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
eval_outputs: list[torch.Tensor] = []
for step in range(1, args.steps + 1):
    x, y = torch.randn(8, 1024), torch.randint(0, 10, (8,))
    loss = loss_fn(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % args.eval_every == 0:
        model.eval()
        xv = torch.randn(2048, 1024)  # a validation batch: 8 MiB of input, 8 MiB of hidden activations
        with torch.no_grad() if args.fixed else contextlib.nullcontext():
            eval_outputs.append(model(xv))  # the leak: each output keeps its graph's activations
        model.train()
    time.sleep(args.step_ms / 1000)
print(f"{len(eval_outputs)} evaluations, last mean {eval_outputs[-1].mean().item():.4f}")
