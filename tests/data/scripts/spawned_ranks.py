"""Two DDP ranks (gloo, CPU) that the script starts itself with torch.multiprocessing.spawn, as the PyTorch
tutorials do: no torchrun, so both write to the script's own output. Each asks for as many intra-op threads
as the machine has CPUs (together twice what it can run). With --hang-at N, rank 1 stops calling collectives
before its step N (a hang in its own code) and rank 0 waits for it in DDP's all_reduce.

usage: spawned_ranks.py PORT STEPS [--hang-at N]
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def wait_for_shard(rank: int, step: int, hang_at: int) -> None:
    if rank == 1 and step == hang_at:
        time.sleep(3600)  # a read that never returns: rank 1 never reaches the next all_reduce


def rank_main(rank: int, port: str, steps: int, hang_at: int) -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    print(f"[rank {rank}] pid {os.getpid()} up", flush=True)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, steps + 1):
        wait_for_shard(rank, step, hang_at)
        loss = torch.nn.functional.mse_loss(model(torch.randn(8, 16)), torch.randn(8, 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"[rank {rank}] step {step}", flush=True)
        if hang_at:
            time.sleep(0.02)
    print(f"[rank {rank}] done after {steps} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    port, steps = sys.argv[1], int(sys.argv[2])
    hang_at = int(sys.argv[4]) if sys.argv[3:4] == ["--hang-at"] else 0
    mp.spawn(rank_main, args=(port, steps, hang_at), nprocs=2)
