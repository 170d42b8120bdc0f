"""A gloo DDP job where one rank is slow to get its batches: --slow-rank R sleeps --slow-ms more per batch in its
dataset's __getitem__ (a slow disk, a busy decoder). Every rank sleeps --work-ms of its own a step besides. Runs
--steps steps, or until --hold FILE exists."""

import argparse
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--slow-rank", type=int, default=2)
parser.add_argument("--slow-ms", type=float, default=40)
parser.add_argument("--work-ms", type=float, default=5)
parser.add_argument("--hold", default="")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()


class Samples(Dataset):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        if rank == args.slow_rank:
            time.sleep(args.slow_ms / 1000 / 8)  # 8 samples a batch
        return torch.randn(64)


model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
for batch in DataLoader(Samples(), batch_size=8):
    time.sleep(args.work_ms / 1000)
    loss = model(batch).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    done = torch.tensor([int(step >= args.steps and (not args.hold or Path(args.hold).exists()))])
    dist.all_reduce(done, op=dist.ReduceOp.MIN)
    if done.item():
        break
dist.destroy_process_group()
