"""A loop that waits on its data: each sample is 'read and decoded' in __getitem__ (8 ms of waiting, as a
slow disk or a remote store would), the model's own step takes 40 ms. With num_workers=0 the loop waits
about three quarters of each step; with 4 workers the batches are ready before the step asks."""

import argparse
import time

import torch
from decoded import Decoded  # beside this script: its directory is first on sys.path
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads, 0: torch's default")
args = parser.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)
model = torch.nn.Linear(32, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Decoded(0.008), batch_size=16, num_workers=args.workers)
for step, (x, y) in enumerate(loader, 1):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.04)  # the model's own work
    if step >= args.steps:
        break
