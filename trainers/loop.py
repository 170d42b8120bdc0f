"""The training loop shared by ddp, dp and model_parallel's single-process modes: optimizer, steps, validation."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from gpumon import telemetry
from trainers import checkpoint
from trainers.cli import UsageError, say, seed_everything
from trainers.data import Data, load, make_loader, set_epoch
from trainers.model import build_model, count_params

Reduce = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Progress:
    """Where training stands and the losses seen, for the caller (and tests) to inspect."""

    epoch: int = 1  # the next epoch to run, 1-based
    global_step: int = 0
    losses: list[float] = field(default_factory=list)
    val: dict[str, float] = field(default_factory=dict)


def load_data(args: argparse.Namespace) -> Data:
    return load(
        args.data,
        data_dir=args.data_dir,
        val_fraction=args.val_fraction,
        seed=args.seed,
        samples=args.samples,
        image_size=args.image_size,
        channels=args.channels,
        classes=args.classes,
    )


def single_process_loaders(
    args: argparse.Namespace, data: Data
) -> tuple[DataLoader, DataLoader | None, DataLoader | None]:
    """Train (shuffled, seeded), validation and test loaders for a one-process trainer."""
    opts = {"num_workers": args.num_workers, "pin_memory": args.pin_memory}
    train = make_loader(data.train, args.batch_size, shuffle=True, seed=args.seed, **opts)
    val = make_loader(data.val, 256, shuffle=False, **opts) if data.val is not None else None
    test = make_loader(data.test, 256, shuffle=False, **opts) if data.test is not None else None
    return train, val, test


def build(args: argparse.Namespace, data: Data) -> nn.Module:
    """The model for ``data``, initialised from --seed (the same weights in every process)."""
    seed_everything(args.seed)
    return build_model(
        args.preset,
        data.in_channels,
        data.num_classes,
        data.image_size,
        arch=args.arch,
        norm=args.norm,
        width=args.width,
        depth=args.depth,
    )


def make_optimizer(args: argparse.Namespace, model: nn.Module) -> torch.optim.Optimizer:
    """SGD (with momentum) or Adam over the trainable parameters only, so frozen ones stay put."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise UsageError("every parameter is frozen: nothing to train")
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr, weight_decay=args.weight_decay)
    return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)


def prepare(args: argparse.Namespace, model: nn.Module, is_main: bool = True) -> tuple[torch.optim.Optimizer, Progress]:
    """--init-from, --freeze, the optimizer, then --resume; run on the plain model before any wrapping."""
    if args.init_from:
        text = checkpoint.init_from(model, args.init_from)
        say(text, is_main)
        telemetry.note(text)
    if args.freeze:
        text = checkpoint.freeze(model, args.freeze)
        say(text, is_main)
        telemetry.note(text)
    optimizer = make_optimizer(args, model)
    progress = Progress()
    found = checkpoint.latest(Path(args.checkpoint_dir)) if args.resume else None
    if found is not None:
        state = checkpoint.load(found)
        checkpoint.restore_model(model, state, found)
        fresh = checkpoint.restore_optimizer(optimizer, state.get("optimizer"), found)
        progress.epoch, progress.global_step = int(state["epoch"]) + 1, int(state["global_step"])
        text = f"resumed from {found}: epoch {state['epoch']} done, step {progress.global_step}{fresh}"
        say(text, is_main)
        telemetry.note(text)
    elif args.resume:
        say(f"no checkpoint in {args.checkpoint_dir}: starting fresh", is_main)
    return optimizer, progress


def evaluate(
    model: nn.Module,
    loader: DataLoader,
    input_device: torch.device,
    output_device: torch.device,
    reduce: Reduce | None = None,
) -> tuple[float, float] | None:
    """(mean loss, accuracy) over ``loader``; ``reduce`` sums [loss, correct, count] across ranks."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=output_device)
    with torch.no_grad():
        for x, y in loader:
            out = model(x.to(input_device, non_blocking=True))
            y = y.to(output_device, non_blocking=True)
            sums[0] += F.cross_entropy(out, y, reduction="sum").double()
            sums[1] += (out.argmax(dim=1) == y).sum()
            sums[2] += y.numel()
    if reduce is not None:
        sums = reduce(sums)
    loss, correct, count = sums.tolist()
    return (loss / count, correct / count) if count else None


def should_stop(args: argparse.Namespace, step: int) -> bool:
    return bool(args.max_steps) and step >= args.max_steps


def planned_steps(args: argparse.Namespace, steps_per_epoch: int, first_epoch: int, done: int) -> int:
    """Optimizer steps this process will take: the epochs left times the steps in one, within --max-steps.

    ``done``: steps a resumed run already took (the step hook counts from this process's start).
    """
    steps = max(0, args.epochs - first_epoch + 1) * steps_per_epoch
    return min(steps, max(0, args.max_steps - done)) if args.max_steps else steps


def fit(
    args: argparse.Namespace,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_loader: DataLoader,
    val_loader: DataLoader | None,
    progress: Progress,
    *,
    input_device: torch.device,
    output_device: torch.device,
    rank: int = 0,
    world_size: int = 1,
    eval_model: nn.Module | None = None,
    reduce: Reduce | None = None,
    test_loader: DataLoader | None = None,
) -> Progress:
    """Train from ``progress`` to --epochs (or --max-steps in all); validate and checkpoint each epoch.

    ``eval_model`` is what validation runs (DDP's inner module: ranks' shards may differ in length, and
    DDP's forward would then wait on collectives the shorter ranks never join).
    """
    is_main = rank == 0
    evaluated = eval_model or model
    per_epoch = -(-len(train_loader) // max(1, getattr(args, "accum_steps", 1)))  # a short last group steps too
    telemetry.plan(planned_steps(args, per_epoch, progress.epoch, progress.global_step), done=progress.global_step)
    for epoch in range(progress.epoch, args.epochs + 1):
        if should_stop(args, progress.global_step):
            break
        set_epoch(train_loader, epoch)
        model.train()
        started = window_start = last = time.perf_counter()
        window_samples = 0
        accum, micro, value, samples = max(1, getattr(args, "accum_steps", 1)), 0, 0.0, 0
        batches = len(train_loader)
        for i, (x, y) in enumerate(train_loader):
            x = x.to(input_device, non_blocking=True)
            y = y.to(output_device, non_blocking=True)
            if micro == 0:
                optimizer.zero_grad(set_to_none=True)
            micro += 1
            stepping = micro == accum or i + 1 == batches
            # DDP all-reduces gradients only on the micro-batch that steps
            no_sync = getattr(model, "no_sync", None)
            with no_sync() if no_sync is not None and not stepping else contextlib.nullcontext():
                loss = F.cross_entropy(model(x), y)
                (loss / accum if accum > 1 else loss).backward()
            value += loss.item() / accum  # a float: telemetry must never hold the graph
            samples += len(x)
            if not stepping:
                continue
            optimizer.step()
            micro = 0
            progress.global_step += 1
            now = time.perf_counter()
            rate = samples / max(now - last, 1e-9)
            last = now
            window_samples += samples
            progress.losses.append(value)
            lr = float(optimizer.param_groups[0]["lr"])
            telemetry.log(step=progress.global_step, loss=value, samples_per_s=rate, lr=lr, epoch=epoch)
            if is_main and (len(progress.losses) == 1 or progress.global_step % args.log_every == 0):
                # Throughput of all ranks, assuming they keep pace with rank 0 (DDP makes them).
                total = window_samples * world_size / max(now - window_start, 1e-9)
                say(f"epoch {epoch} step {progress.global_step} loss {value:.4f} samples/s {total:.0f}")
                window_start, window_samples = now, 0
            value, samples = 0.0, 0
            if should_stop(args, progress.global_step):
                break
        line = f"epoch {epoch} done: step {progress.global_step} time {time.perf_counter() - started:.1f}s"
        if val_loader is not None:
            result = evaluate(evaluated, val_loader, input_device, output_device, reduce)
            if result is not None:
                progress.val = {"val_loss": result[0], "val_acc": result[1]}
                telemetry.log(step=progress.global_step, val_loss=result[0], val_acc=result[1], epoch=epoch)
                line += f" val_loss {result[0]:.4f} val_acc {result[1]:.4f}"
        say(line, is_main)
        progress.epoch = epoch + 1
        if is_main and not args.no_checkpoint:
            state = checkpoint.training_state(model, optimizer, epoch, progress.global_step)
            say(f"checkpoint {checkpoint.save(Path(args.checkpoint_dir), state)}")
    if test_loader is not None:
        result = evaluate(evaluated, test_loader, input_device, output_device, reduce)
        if result is not None:
            telemetry.log(step=progress.global_step, test_loss=result[0], test_acc=result[1])
            say(f"test_loss {result[0]:.4f} test_acc {result[1]:.4f}", is_main)
    return progress


def describe(args: argparse.Namespace, model: nn.Module, extra: str = "") -> str:
    """One line naming the model, its size and the data."""
    name = f"mlp {args.depth}x{args.width}" if args.arch == "mlp" else f"resnet {args.preset} norm={args.norm}"
    trainable = count_params(model, trainable_only=True)
    return f"model {name}: {count_params(model)} params ({trainable} trainable); data {args.data}{extra}"
