"""A loop fed by a slow DataLoader (each sample 'decoded' in 6 ms, batch 8: about 50 ms a batch) with about
30 ms of its own work per step. It measures its own wait around the loader and prints, last,
``OWN_WAIT_SHARE=<share>`` over the same steps: the reference for gpumon's data share."""

import argparse
import time

import torch
from decoded import Decoded  # beside this script: its directory is first on sys.path
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=120)
parser.add_argument("--pin", action="store_true", help="pin_memory=True")
args = parser.parse_args()
model = torch.nn.Linear(32, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Decoded(0.006), batch_size=8, num_workers=0, pin_memory=args.pin)
it = iter(loader)
waited = 0.0
began = None
for step in range(1, args.steps + 1):
    t0 = time.perf_counter()
    x, y = next(it)
    if began is not None:
        waited += time.perf_counter() - t0
    if step == 11:  # the first steps hold start-up: measured from here on
        began, waited = time.perf_counter(), 0.0
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.03)  # the model's own work
print(f"OWN_WAIT_SHARE={waited / (time.perf_counter() - began):.3f}", flush=True)
