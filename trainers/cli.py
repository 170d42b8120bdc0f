"""Command-line options shared by every trainer, argument checks, device choice and the exit-2 error path."""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    import torch

# No torch here: --help and a bad option answer before `import torch` (~2.5 CPU-s); the programs load it after.
T = TypeVar("T")
P = ParamSpec("P")

DATASETS = ("digits", "cifar10", "synthetic")
PRESETS: dict[str, tuple[tuple[int, ...], int]] = {  # Bottleneck blocks per stage, base width (model.py)
    "tiny": ((1, 1), 8),
    "small": ((1, 1, 1), 16),
    "medium": ((2, 2, 2, 2), 32),
    "resnet18ish": ((2, 2, 2, 2), 32),
    "resnet50": ((3, 4, 6, 3), 64),
}
NORMS = ("batch", "group", "none")
ARCHS = ("resnet", "mlp")


class DataError(Exception):
    """A dataset is missing or malformed; the CLI prints it as one line and exits 2."""


class UsageError(Exception):
    """A bad combination of options or a missing file: one line on stderr, exit 2."""


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def fraction(text: str) -> float:
    value = _number(text, float)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _number(text: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {'an integer' if kind is int else 'a number'}: {text!r}") from None


def default_checkpoint_dir() -> Path:
    run_dir = os.environ.get("GPUMON_RUN_DIR")
    return Path(run_dir) / "checkpoints" if run_dir else Path("checkpoints")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show defaults, except the empty ones (None, off flags, [])."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or action.default == []:
            return action.help or ""
        return super()._get_help_string(action) or ""


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with the data, model, optimisation, checkpoint and device options every trainer takes."""
    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=_HelpFormatter)
    data = parser.add_argument_group("data")
    data.add_argument("--data", choices=DATASETS, default="digits", help="digits: sklearn 8x8, no download")
    data.add_argument("--data-dir", help="cifar10: folder with the python-version batches (never downloaded)")
    data.add_argument("--val-fraction", type=fraction, default=0.1, help="seeded share of training data held out")
    data.add_argument("--samples", type=positive_int, default=4096, help="synthetic: number of images")
    data.add_argument("--image-size", type=positive_int, default=32, help="synthetic: height = width")
    data.add_argument("--channels", type=positive_int, default=3, help="synthetic: image channels")
    data.add_argument("--classes", type=positive_int, default=10, help="synthetic: number of classes")
    data.add_argument("--batch-size", type=positive_int, default=64, help="samples per step in each process")
    data.add_argument(
        "--accum-steps", type=positive_int, default=1, help="gradient accumulation: batches per optimizer step"
    )
    data.add_argument("--num-workers", type=non_negative_int, default=0, help="DataLoader worker processes")
    data.add_argument("--pin-memory", action="store_true", help="page-locked batches for faster host-to-GPU copies")

    model = parser.add_argument_group("model")
    model.add_argument("--arch", choices=ARCHS, default="resnet", help="Bottleneck ResNet, or an MLP")
    model.add_argument("--preset", choices=PRESETS, default="tiny", help="resnet size (resnet50: [3,4,6,3] x 64)")
    model.add_argument("--norm", choices=NORMS, default="batch", help="resnet normalisation")
    model.add_argument("--width", type=positive_int, default=512, help="mlp: hidden width")
    model.add_argument("--depth", type=non_negative_int, default=8, help="mlp: hidden layers")

    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=positive_int, default=3, help="epochs in all, resumed ones included")
    train.add_argument(
        "--max-steps", type=non_negative_int, default=0, help="stop after this many steps in all (0: no limit)"
    )
    train.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd", help="cross-entropy loss either way")
    train.add_argument("--lr", type=positive_float, default=0.05, help="learning rate")
    train.add_argument("--momentum", type=non_negative_float, default=0.9, help="sgd momentum")
    train.add_argument("--weight-decay", type=non_negative_float, default=0.0, help="L2 penalty")
    train.add_argument("--seed", type=non_negative_int, default=0, help="weights, split and shuffling")
    train.add_argument("--log-every", type=positive_int, default=20, help="print a progress line every N steps")

    ckpt = parser.add_argument_group("checkpoints")
    ckpt.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="default: $GPUMON_RUN_DIR/checkpoints when set, else ./checkpoints",
    )
    ckpt.add_argument("--no-checkpoint", action="store_true", help="write no checkpoints")
    ckpt.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest checkpoint with its optimizer state; none there: start fresh (or --init-from)",
    )
    ckpt.add_argument("--init-from", type=Path, metavar="CKPT", help="load model weights (mismatched shapes skipped)")
    ckpt.add_argument(
        "--freeze",
        nargs="+",
        default=[],
        metavar="PREFIX",
        help="no gradient for parameters whose names start with a PREFIX, e.g. stem layer1 "
        "(BatchNorm running statistics still update)",
    )
    return parser


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda if available")


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """Fill defaults that depend on the environment."""
    if args.checkpoint_dir is None:
        args.checkpoint_dir = default_checkpoint_dir()
    return args


def resolve_device(choice: str, local_rank: int = 0) -> torch.device:
    """cpu, or cuda:<local_rank>; auto picks cuda when one is visible."""
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible to torch")
    if choice == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def main_guard(main: Callable[P, int]) -> Callable[P, int]:
    """Turn DataError/UsageError into ``error: ...`` on stderr and exit status 2 (argparse's convention)."""

    @functools.wraps(main)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except (DataError, UsageError) as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None

    return wrapper


def say(text: str, enabled: bool = True) -> None:
    if enabled:
        print(text, flush=True)
