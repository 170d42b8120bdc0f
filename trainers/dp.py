"""torch.nn.DataParallel training in one process (one batch split over the visible GPUs).

python -m trainers.dp --epochs 1
"""

from __future__ import annotations

import argparse
import sys

from trainers.cli import add_device_arg, finish_args, main_guard, make_parser, resolve_device, say

DESCRIPTION = """\
DataParallel training in one process: each batch (--batch-size in all) is scattered over the visible
GPUs and the outputs gathered on the first. With fewer than 2 GPUs it trains the plain model on the
one device (cuda or cpu) and says so."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = make_parser("python -m trainers.dp", DESCRIPTION)
    add_device_arg(parser)
    return finish_args(parser.parse_args(argv))


@main_guard
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # torch after the options: --help and a bad option answer without it (trainers/cli.py)
    import torch
    from torch import nn

    from gpumon import telemetry
    from trainers.loop import build, describe, fit, load_data, prepare, single_process_loaders

    device = resolve_device(args.device)
    data = load_data(args)
    model = build(args, data).to(device)
    optimizer, progress = prepare(args, model)
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    wrapped: nn.Module = model
    if gpus >= 2:
        wrapped = nn.DataParallel(model)
        text = f"DataParallel over {gpus} GPUs"
    else:
        text = f"DataParallel: {gpus} GPU(s) in use (needs 2 or more): running the plain model on {device}"
    say(text)
    telemetry.note(text)
    say(describe(args, model, f" ({len(data.train)} train samples)"))
    train_loader, val_loader, test_loader = single_process_loaders(args, data)
    fit(
        args,
        wrapped,
        optimizer,
        train_loader,
        val_loader,
        progress,
        input_device=device,
        output_device=device,
        test_loader=test_loader,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
