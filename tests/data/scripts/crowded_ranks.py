"""Two ranks started by torch.multiprocessing.spawn (no torchrun, so no OMP_NUM_THREADS=1), each asking
for as many intra-op threads as the machine has CPUs: together twice what the CPUs can run."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, world: int, port: str, steps: int) -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    port, steps = sys.argv[1], int(sys.argv[2])
    mp.spawn(rank_main, args=(2, port, steps), nprocs=2)
