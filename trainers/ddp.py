"""DistributedDataParallel training, one process per device, under torchrun.

python -m torch.distributed.run --standalone --nproc-per-node 2 -m trainers.ddp --epochs 1
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from trainers.cli import add_device_arg, finish_args, main_guard, make_parser, resolve_device, say

if TYPE_CHECKING:
    import torch

DESCRIPTION = """\
DistributedDataParallel training under torchrun: RANK, LOCAL_RANK and WORLD_SIZE come from torchrun;
gloo on CPU, nccl on CUDA (device cuda:LOCAL_RANK). Each rank trains on its DistributedSampler shard;
validation metrics are summed over all ranks; rank 0 prints and writes checkpoints. Run without
torchrun, it forms a one-process group in memory (world size 1) and trains the same way."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser("python -m trainers.ddp", DESCRIPTION)
    add_device_arg(parser)
    return finish_args(parser.parse_args(argv))


def init_group(device: torch.device, rank: int, world_size: int) -> str:
    """Join torchrun's group, or make a one-process group when not launched by torchrun."""
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    device_id = device if device.type == "cuda" else None
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend, rank=rank, world_size=world_size, device_id=device_id)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, device_id=device_id)
    return backend


def main(argv: list[str] | None = None) -> int | None:
    args = parse_args(argv)  # torch after the options: --help and a bad option answer without it (trainers/cli.py)
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(main_guard(train))(args)


def train(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gpumon import telemetry
    from trainers.data import make_loader, shard
    from trainers.loop import build, describe, fit, load_data, prepare

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    is_main = rank == 0
    device = resolve_device(args.device, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    data = load_data(args)  # before joining the group: a data error then ends every rank alike, at once
    model = build(args, data).to(device)
    optimizer, progress = prepare(args, model, is_main)
    backend = init_group(device, rank, world_size)
    try:
        say(f"ddp: world size {world_size}, backend {backend}, device {device}", is_main)
        say(describe(args, model, f" ({len(data.train)} train samples)"), is_main)
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        loader_opts = {"num_workers": args.num_workers, "pin_memory": args.pin_memory}
        train_loader = make_loader(
            data.train,
            args.batch_size,
            shuffle=True,
            seed=args.seed,
            distributed=True,
            rank=rank,
            world_size=world_size,
            **loader_opts,
        )

        def sharded(ds: torch.utils.data.TensorDataset | None) -> torch.utils.data.DataLoader | None:
            return None if ds is None else make_loader(shard(ds, rank, world_size), 256, shuffle=False, **loader_opts)

        def all_sum(sums: torch.Tensor) -> torch.Tensor:
            dist.all_reduce(sums)  # every rank gets the same totals
            return sums

        fit(
            args,
            ddp,
            optimizer,
            train_loader,
            sharded(data.val),
            progress,
            input_device=device,
            output_device=device,
            rank=rank,
            world_size=world_size,
            eval_model=model,
            reduce=all_sum,
            test_loader=sharded(data.test),
        )
        telemetry.note(f"ddp rank {rank} finished at step {progress.global_step}")
        # Rank 1 leaving while rank 0 wrote the last checkpoint hung rank 1 at exit in ~1 run of 3 here
        # (gloo, torch 2.13); leaving together and freeing DDP before the group each prevented it.
        dist.barrier()
        del ddp
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
