"""Two DDP ranks started by torch.multiprocessing.spawn (gloo, CPU), each with a DataLoader whose worker starts
again at every epoch (persistent_workers=False, torch's default) and is slow to start: its worker_init_fn
sleeps, as a worker pays for its imports and setup. (In a rank started by mp.spawn, torch's default start
method for the workers is spawn too: each then imports torch and this script again.)

Rank 0 writes its own measures to OUT (JSON): its steps, the seconds from the end of its first step to the end
of its last (gpumon's pace starts at the first step too), the whole loop's seconds, and the seconds from each
epoch's last step to the next epoch's first batch (its workers stopped, the next ones started, a batch made).

``--mark N --mark-file F``: epoch N's worker writes F as it starts and takes 3 s more (a test then stops rank 0
while it waits for the epoch's first batch)."""

import argparse
import functools
import json
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset, DistributedSampler, get_worker_info


class Samples(Dataset):
    epoch = 0  # set by the loop before each epoch: a forked worker sees it

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int):
        return torch.randn(32), i % 4


def slow_start(seconds: float, mark: int, mark_file: str, worker_id: int) -> None:
    info = get_worker_info()
    if mark_file and info is not None and info.dataset.epoch == mark:
        with open(mark_file, "w") as fh:
            fh.write("started")
        seconds += 3.0  # the rank waits for this batch a while: long enough for a test to stop it there
    time.sleep(seconds)


def rank_main(rank: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=2)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Samples()
    sampler = DistributedSampler(data, num_replicas=2, rank=rank)
    loader = DataLoader(
        data,
        batch_size=args.batch,
        sampler=sampler,
        num_workers=1,
        worker_init_fn=functools.partial(slow_start, args.start, args.mark, args.mark_file),
        persistent_workers=args.persistent,
        multiprocessing_context=args.method or None,
    )
    steps, began, first, starts, done = 0, time.time(), None, 0.0, None
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        data.epoch = epoch
        edge = True
        for x, y in loader:
            if edge and done is not None:  # from the last step of the epoch before (its workers stopped, these
                starts += time.time() - done  # started) to this epoch's first batch
            edge = False
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            done = time.time()
            first = first or done
    end = time.time()
    if rank == 0:
        out = {"steps": steps, "seconds": end - first, "loop_seconds": end - began, "start_waits": starts}
        with open(args.out, "w") as fh:
            json.dump(out, fh)
        print(f"rank 0: {steps} steps, {(steps - 1) / (end - first):.2f} steps/s after the first", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port")
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32, help="per rank: 256 / 2 / batch steps an epoch")
    parser.add_argument("--start", type=float, default=3.0, help="seconds a worker takes to start")
    parser.add_argument("--method", default="", help="the workers' start method: fork, spawn (default: torch's)")
    parser.add_argument("--persistent", action="store_true", help="persistent_workers=True (the fix)")
    parser.add_argument("--mark", type=int, default=-1)
    parser.add_argument("--mark-file", default="")
    mp.spawn(rank_main, args=(parser.parse_args(),), nprocs=2)
