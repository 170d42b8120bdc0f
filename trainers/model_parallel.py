"""Model parallelism: the model cut into two stages on two devices.

    python -m trainers.model_parallel --mode naive --devices cuda:0,cuda:1
    python -m trainers.model_parallel --mode micro-batch --split-size 16
    python -m torch.distributed.run --standalone --nproc-per-node 2 -m trainers.model_parallel \\
        --mode pipeline --schedule 1f1b --micro-batches 8
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from trainers.cli import UsageError, finish_args, main_guard, make_parser, positive_int, say

if TYPE_CHECKING:
    import torch

# torch loads after the options: --help and a bad option answer without it (trainers/cli.py)

DESCRIPTION = """\
Model-parallel training: the model is cut into two stages (first half of the blocks | the rest).
naive: stage 0 on the first device, stage 1 on the second, activations copied between them; one
device works at a time. micro-batch: one process splits each batch into --split-size chunks, so
stage 1 works on chunk i while stage 0 starts chunk i+1 (overlap needs asynchronous CUDA; on CPU it is
correct but not faster). pipeline: one process per stage under torchrun (--nproc-per-node 2) with
torch.distributed.pipelining, GPipe or 1F1B over --micro-batches (gloo on CPU, nccl on CUDA); the
last stage prints the loss. BatchNorm sees micro-batches, not the whole batch: use --norm group (or
none) for results equal to the unsplit model's."""


def default_devices() -> str:
    import torch

    gpus = torch.cuda.device_count()
    return "cuda:0,cuda:1" if gpus >= 2 else "cuda:0,cuda:0" if gpus == 1 else "cpu,cpu"


def parse_devices(text: str) -> tuple[torch.device, torch.device]:
    import torch

    try:
        devices = tuple(torch.device(part.strip()) for part in text.split(","))
    except RuntimeError as exc:
        raise UsageError(f"--devices {text}: {exc}") from None
    if len(devices) != 2:
        raise UsageError(f"--devices needs two devices, e.g. cuda:0,cuda:1 (got {text})")
    for device in devices:
        if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
            raise UsageError(f"--devices {text}: only {torch.cuda.device_count()} CUDA device(s) visible")
    return devices[0], devices[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser("python -m trainers.model_parallel", DESCRIPTION)
    mp = parser.add_argument_group("model parallel")
    mp.add_argument(
        "--mode", choices=("naive", "micro-batch", "pipeline"), default="naive", help="see above; pipeline: torchrun"
    )
    mp.add_argument(
        "--devices",
        help="stage 0 and stage 1 devices (pipeline: per rank); default: cuda:0,cuda:1 with 2 or more GPUs, "
        "cuda:0,cuda:0 with one, else cpu,cpu",
    )
    mp.add_argument("--split-size", type=positive_int, default=16, help="micro-batch: samples per chunk")
    mp.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe", help="pipeline schedule")
    mp.add_argument("--micro-batches", type=positive_int, default=4, help="pipeline: micro-batches per batch")
    mp.add_argument(
        "--dump-first-step",
        metavar="DIR",
        help="pipeline: each stage saves its inputs, parameters, gradients and loss of the first step to DIR",
    )
    args = finish_args(parser.parse_args(argv))
    if args.mode == "pipeline" and args.schedule == "1f1b" and args.micro_batches < 2:
        parser.error("--schedule 1f1b needs --micro-batches of at least 2 (one per stage)")
    if args.mode == "pipeline" and args.batch_size % args.micro_batches:
        parser.error(f"--batch-size {args.batch_size} must be a multiple of --micro-batches {args.micro_batches}")
    return args


def bn_note(args: argparse.Namespace, unit: str) -> None:
    """Say that BatchNorm normalises over each micro-batch, so results differ from the unsplit model's."""
    from gpumon import telemetry

    if args.arch == "resnet" and args.norm == "batch":
        text = f"BatchNorm statistics come from {unit}, not whole batches (--norm group avoids that)"
        say(text)
        telemetry.note(text)


def train_single_process(args: argparse.Namespace, devices: tuple[torch.device, torch.device]) -> int:
    """naive and micro-batch modes: the shared loop drives a TwoStageModel."""
    from trainers.loop import build, describe, fit, load_data, prepare, single_process_loaders
    from trainers.model import TwoStageModel

    data = load_data(args)
    model = build(args, data)
    split_size = args.split_size if args.mode == "micro-batch" else 0
    two = TwoStageModel(model, devices, split_size)
    optimizer, progress = prepare(args, model)
    say(f"model_parallel {args.mode}: stage 0 on {devices[0]}, stage 1 on {devices[1]}")
    if split_size:
        bn_note(args, f"chunks of {split_size}")
    say(describe(args, model, f" ({len(data.train)} train samples)"))
    train_loader, val_loader, test_loader = single_process_loaders(args, data)
    fit(
        args,
        two,
        optimizer,
        train_loader,
        val_loader,
        progress,
        input_device=devices[0],
        output_device=devices[1],
        test_loader=test_loader,
    )
    return 0


def main(argv: list[str] | None = None) -> int | None:
    args = parse_args(argv)
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(main_guard(train))(args)


def train(args: argparse.Namespace) -> int:
    from trainers.pipeline import train_pipeline

    devices = parse_devices(args.devices or default_devices())
    if args.mode == "pipeline":
        if int(os.environ.get("RANK", "0")) == 0:
            bn_note(args, f"micro-batches of {args.batch_size // args.micro_batches}")
        return train_pipeline(args, devices)
    return train_single_process(args, devices)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
