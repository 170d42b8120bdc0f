"""A loss that goes bad in one of two ways, with no gpumon code in it (the loss is read from backward()).

--mode overflow: a finite regression loss times a factor that grows 1e25x per step, so float32 overflows to inf
at the 3rd step; from the 5th the factor is inf * 0, NaN. The gradients' non-finite entries are zeroed (a common
guard), so the model stays finite: the loss climbed, then overflowed.
--mode bad-batch: a steady loss on clean batches, then one batch with a NaN in it at the 6th step: NaN at once,
and finite again after (the guard keeps the weights clean).
Steps are gpumon's: optimizer steps from 1. --step-ms keeps every step read (the recorder reads at most 200/s).
"""

import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["overflow", "bad-batch"], default="overflow")
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--step-ms", type=float, default=20.0)
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(1, args.steps + 1):
    optimizer.zero_grad()
    inputs = x.clone()
    factor = torch.tensor(1.0)
    if args.mode == "overflow":
        factor = torch.tensor(1e25) ** (step - 1) if step < 5 else torch.tensor(float("inf")) * 0.0
    elif step == 6:
        inputs[3, 2] = float("nan")
    loss = torch.nn.functional.mse_loss(model(inputs), y) * factor
    loss.backward()
    for p in model.parameters():
        p.grad.nan_to_num_(0.0, 0.0, 0.0)
    optimizer.step()
    print(f"step {step}: loss {loss.item()}", flush=True)
    time.sleep(args.step_ms / 1000)
