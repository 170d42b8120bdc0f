"""A training loop that runs out of memory above a batch size: the demo of ``gpumon launch --oom-retry``.

Each sample needs --mb-per-sample MiB of activations. On the CPU they live under an
address-space limit of --limit-gb GiB above what the process already uses (a stand-in
for a GPU's or a cgroup's fixed memory); with --device cuda they are allocated on the
GPU, whose own size is the limit. The allocation that fails is a real one, so the error
is PyTorch's own ("DefaultCPUAllocator: can't allocate memory", "CUDA out of memory").

    gpumon launch script trainers/examples/oom_batch.py --oom-retry --keep-batch -- --batch-size 64 --accum-steps 1
"""

from __future__ import annotations

import argparse
import resource

import psutil
import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--accum-steps", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--mb-per-sample", type=int, default=128)
    parser.add_argument("--limit-gb", type=float, default=3.0, help="cpu only: the address-space limit")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: the GPU's size is the limit")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        limit = psutil.Process().memory_info().vms + int(args.limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    model = nn.Linear(16, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    print(f"batch {args.batch_size} x {args.accum_steps} accumulation steps", flush=True)
    for step in range(args.steps):
        optimizer.zero_grad()
        for _ in range(args.accum_steps):
            activations = torch.empty(args.batch_size * args.mb_per_sample * 2**20, dtype=torch.uint8, device=device)
            loss = model(torch.randn(args.batch_size, 16, device=device)).pow(2).mean() / args.accum_steps
            loss.backward()
            del activations
        optimizer.step()
        print(f"step {step} loss {loss.item() * args.accum_steps:.4f}", flush=True)
    print(f"fits: batch {args.batch_size} x {args.accum_steps} = {args.batch_size * args.accum_steps}", flush=True)


if __name__ == "__main__":
    main()
