"""A plain torch training loop with no gpumon code: steps until the file named by argv[1] exists; with
argv[2] = N it raises after N steps instead (a failed run, whose end is an alert)."""

import os
import sys
import time

import torch

stop = sys.argv[1]
fail_at = int(sys.argv[2]) if len(sys.argv) > 2 else None
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(256, 8)
y = x.sum(1, keepdim=True)
step = 0
end = time.monotonic() + 600  # a test that failed before it made its stop file never leaves this run for good
while not os.path.exists(stop) and time.monotonic() < end:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    if fail_at is not None and step >= fail_at:
        raise RuntimeError(f"the data loader lost its shard at step {step}")
    time.sleep(0.02)  # a step's pace: the loop is the user's, not a wait of the test
