"""A tiny regression whose learning rate decides its fate: lr=1e6 turns the loss inf then NaN in a few steps.

--log reports loss and lr with gpumon.telemetry.log (as a script of ours would); without it gpumon reads the
loss from backward() (no code change). --out FILE gets the first step whose loss was not finite.
"""

import argparse
import math
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=1e6)
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--step-ms", type=float, default=20.0)
parser.add_argument("--log", action="store_true")
parser.add_argument("--out", default="")
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
x, y = torch.randn(64, 8), torch.randn(64, 1)
first_bad = None
for step in range(args.steps):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    value = loss.item()
    if first_bad is None and not math.isfinite(value):
        first_bad = step
        if args.out:
            with open(args.out, "w") as out:
                out.write(str(step))
    if args.log:
        from gpumon import telemetry

        telemetry.log(step, loss=value, lr=optimizer.param_groups[0]["lr"])
    time.sleep(args.step_ms / 1000)
print("first non-finite step:", first_bad)
