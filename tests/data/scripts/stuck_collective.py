"""A gloo job that steps (an optimizer step and an all_reduce of its gradients a step) and then, at --at, gets
stuck in one of three ways, as a run under torchrun does:

- mismatch: rank 1 calls broadcast where the others call all_reduce (a branch on the rank);
- size: the last rank all-reduces half the bytes (a shape computed from its own shard);
- missing: the last rank blocks in its data loading (next_batch) and never reaches the all_reduce.

    torchrun --nproc-per-node N stuck_collective.py {mismatch,size,missing} [--at STEP] [--backend nccl] [--async-op]

``--async-op``: the step's all_reduce is ``dist.all_reduce(grads, async_op=True).wait()``.

With NCCL (a GPU per rank) a collective returns once enqueued: the rank blocks at its next sync, the loss's
``.item()``, as a training loop that logs its loss does.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("how", choices=["mismatch", "size", "missing", "none"])
parser.add_argument("--at", type=int, default=8)
parser.add_argument("--elements", type=int, default=1 << 20)  # 4 MiB of float32
parser.add_argument("--backend", default="gloo")
parser.add_argument("--async-op", action="store_true")
args = parser.parse_args()

device = torch.device("cpu")
if args.backend == "nccl":
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
dist.init_process_group(args.backend)
rank, world = dist.get_rank(), dist.get_world_size()
last = world - 1
model = torch.nn.Linear(16, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
grads = torch.zeros(args.elements, device=device)


def next_batch(step: int) -> torch.Tensor:
    if args.how == "missing" and rank == last and step == args.at:
        time.sleep(3600)  # a read that never returns (a hung network mount)
    return torch.randn(8, 16, device=device)


for step in range(1, 100000):
    loss = model(next_batch(step)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    if step == args.at and args.how == "mismatch" and rank == 1:
        dist.broadcast(grads, src=0)  # the odd one out
    elif step == args.at and args.how == "size" and rank == last:
        dist.all_reduce(grads[: args.elements // 2])
    elif args.async_op:
        dist.all_reduce(grads, async_op=True).wait()
    else:
        dist.all_reduce(grads)
    opt.step()
    loss.item()  # the loop's loss logged: on NCCL, where a rank waits for the collective
    time.sleep(0.02)
