"""model_parallel's pipeline mode: one process per stage with torch.distributed.pipelining.

Both processes build the whole model from the same seed and keep their stage; both read the data in
the same seeded order (stage 0 feeds the images, the last stage the labels). The schedule cuts each
batch into --micro-batches equal chunks and divides gradients by their number, so with a
micro-batch-independent model (``--norm group``/``none``, or the MLP) a step equals the unsplit model's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining.schedules import PipelineScheduleSingle
from torch.utils.data import DataLoader

from gpumon import telemetry
from gpumon.core.safefs import private_dirs
from trainers import checkpoint
from trainers.cli import UsageError, say
from trainers.data import Data, make_loader
from trainers.loop import build, describe, load_data, make_optimizer, planned_steps, should_stop
from trainers.model import split_model

SCHEDULES: dict[str, type[PipelineScheduleSingle]] = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
WARMUP_STEPS = 2  # left out of the step-time summary: first-call allocation and shape set-up


def to_cpu(obj: Any) -> Any:
    """Tensors in nested dicts/lists moved to the CPU, for gather_object and torch.save."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def _check_launch(devices: tuple[torch.device, torch.device]) -> int:
    world_size = int(os.environ.get("WORLD_SIZE", "0"))
    if world_size != 2 or "MASTER_ADDR" not in os.environ:
        raise UsageError(
            "--mode pipeline runs one process per stage: launch it with "
            "python -m torch.distributed.run --standalone --nproc-per-node 2 -m trainers.model_parallel --mode pipeline"
        )
    if devices[0].type == "cuda" and devices[0] == devices[1]:
        raise UsageError(f"--mode pipeline needs one GPU per stage (got {devices[0]} twice); use cpu,cpu or naive mode")
    return int(os.environ["RANK"])


def _padded(x: torch.Tensor, size: int) -> torch.Tensor:
    """The schedule keeps the shapes of its first step: fill a short last batch up with zeros."""
    if len(x) == size:
        return x
    return torch.cat([x, x.new_zeros((size - len(x), *x.shape[1:]))])


def validate(
    schedule: PipelineScheduleSingle,
    module: nn.Module,
    loader: DataLoader,
    rank: int,
    batch_size: int,
    device: torch.device,
) -> tuple[float, float] | None:
    """(mean loss, accuracy) on the last stage (None on stage 0), counting only the real rows of padded batches."""
    module.eval()
    loss_sum = correct = count = 0.0
    with torch.no_grad():
        for x, y in loader:
            if rank == 0:
                schedule.eval(_padded(x, batch_size).to(device))
                continue
            out = schedule.eval(target=_padded(y, batch_size).to(device), losses=[])[: len(y)]
            y = y.to(device)
            loss_sum += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(dim=1) == y).sum().item()
            count += len(y)
    module.train()
    return (loss_sum / count, correct / count) if count else None


def stage_shapes(model: nn.Module, data: Data, micro_batch: int) -> tuple[torch.Tensor, ...]:
    """A micro-batch's input, activation at the cut and logits, from the whole model in eval mode (CPU).

    Given as examples, PipelineStage skips its shape inference, which on a non-first stage runs the
    stage in train mode on an uninitialised buffer: BatchNorm's running statistics became NaN there,
    so every validation (eval mode) read NaN. Eval mode under no_grad changes no buffer.
    """
    stage0, stage1 = split_model(model)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        x = torch.zeros(micro_batch, data.in_channels, data.image_size, data.image_size)
        middle = stage0(x)
        out = stage1(middle)
    model.train(was_training)
    return x, middle, out


def stage_examples(
    model: nn.Module, shapes: tuple[torch.Tensor, ...], rank: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's example input and output, needing gradients where training's would (after --freeze)."""
    stage0, stage1 = split_model(model)
    grads0 = any(p.requires_grad for p in stage0.parameters())
    grads1 = grads0 or any(p.requires_grad for p in stage1.parameters())
    x, middle, out = (t.detach().clone() for t in shapes)
    middle.requires_grad_(grads0)
    out.requires_grad_(grads1)
    pair = (x, middle) if rank == 0 else (middle, out)
    return pair[0].to(device), pair[1].to(device)


def save_merged(
    args: argparse.Namespace, module: nn.Module, optimizer: torch.optim.Optimizer, epoch: int, step: int
) -> None:
    """Gather both stages on rank 0 and write one checkpoint: the whole model plus each stage's optimizer."""
    mine = to_cpu({"model": module.state_dict(), "optimizer": optimizer.state_dict()})
    gathered: list[Any] | None = [None, None] if dist.get_rank() == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if gathered is not None:
        state = {
            "model": {k: v for part in gathered for k, v in part["model"].items()},
            "optimizer": None,  # two optimizers, one per stage: see optimizer_stages
            "optimizer_stages": [part["optimizer"] for part in gathered],
            "epoch": epoch,
            "global_step": step,
        }
        say(f"checkpoint {checkpoint.save(Path(args.checkpoint_dir), state)}")


@dataclass
class StageRun:
    """One process's stage: its module, optimizer and schedule, and the step count they share."""

    args: argparse.Namespace
    rank: int
    device: torch.device
    module: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: PipelineScheduleSingle
    step: int = 0
    step_times: list[float] = field(default_factory=list)

    @property
    def first(self) -> bool:
        return self.rank == 0

    @property
    def last(self) -> bool:
        return self.rank == 1

    def train_epoch(self, loader: DataLoader, epoch: int) -> None:
        args, device = self.args, self.device
        self.module.train()
        last_end = time.perf_counter()
        for x, y in loader:
            self.optimizer.zero_grad(set_to_none=True)
            losses: list[torch.Tensor] = []
            if self.first:
                self.schedule.step(x.to(device))
            else:
                self.schedule.step(target=y.to(device), losses=losses)
            loss = torch.stack(losses).mean().item() if self.last else None  # mean of equal chunks = batch mean
            if args.dump_first_step and not self.step_times:
                dump_step(Path(args.dump_first_step), self.rank, self.module, x if self.first else None, y, loss)
            self.optimizer.step()
            self.step += 1
            now = time.perf_counter()
            self.step_times.append(now - last_end)
            last_end = now
            metrics = {"samples_per_s": len(x) / self.step_times[-1], "lr": float(self.optimizer.param_groups[0]["lr"])}
            if loss is not None:
                metrics["loss"] = loss
            telemetry.log(step=self.step, epoch=epoch, **metrics)
            if self.last and (len(self.step_times) == 1 or self.step % args.log_every == 0):
                say(f"epoch {epoch} step {self.step} loss {loss:.4f} samples/s {metrics['samples_per_s']:.0f}")
            if should_stop(args, self.step):
                break

    def evaluate(self, loader: DataLoader) -> tuple[float, float] | None:
        return validate(self.schedule, self.module, loader, self.rank, self.args.batch_size, self.device)

    def timing(self) -> str | None:
        timed = self.step_times[WARMUP_STEPS:]
        if not timed:
            return None
        return (
            f"step time median {1000 * statistics.median(timed):.1f} ms over {len(timed)} steps "
            f"(first {WARMUP_STEPS} left out), batch {self.args.batch_size}, {self.args.micro_batches} micro-batches"
        )


def prepare_stage(
    args: argparse.Namespace, model: nn.Module, rank: int, device: torch.device
) -> tuple[nn.Module, torch.optim.Optimizer, int, int]:
    """--init-from, --freeze and --resume on the whole model (prefixes may name either stage), then this stage.

    Returns the stage module on ``device``, its optimizer, the first epoch to run and the step count.
    """
    for text in (
        checkpoint.init_from(model, args.init_from) if args.init_from else "",
        checkpoint.freeze(model, args.freeze) if args.freeze else "",
    ):
        if text:
            say(text, rank == 0)
            telemetry.note(text)
    found = checkpoint.latest(Path(args.checkpoint_dir)) if args.resume else None
    state = checkpoint.load(found) if found else {}
    if found is not None:
        checkpoint.restore_model(model, state, found)
    module = split_model(model)[rank].to(device)
    optimizer = make_optimizer(args, module)
    if found is None:
        if args.resume:
            say(f"no checkpoint in {args.checkpoint_dir}: starting fresh", rank == 0)
        return module, optimizer, 1, 0
    saved = state.get("optimizer_stages")
    fresh = checkpoint.restore_optimizer(optimizer, saved[rank] if saved else None, found)
    say(f"resumed from {found}: epoch {state['epoch']} done, step {state['global_step']}{fresh}", rank == 0)
    return module, optimizer, int(state["epoch"]) + 1, int(state["global_step"])


def train_pipeline(args: argparse.Namespace, devices: tuple[torch.device, torch.device]) -> int:
    rank = _check_launch(devices)
    device = devices[rank]
    data = load_data(args)
    model = build(args, data)  # the same seed in both processes: the same whole model, each keeps its stage
    shapes = stage_shapes(model, data, args.batch_size // args.micro_batches)
    module, optimizer, first_epoch, step = prepare_stage(args, model, rank, device)
    example_in, example_out = stage_examples(model, shapes, rank, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    try:
        where = f"stages on {devices[0]},{devices[1]}, {backend}"
        say(f"pipeline: {args.schedule}, {args.micro_batches} micro-batches, {where}", rank == 0)
        say(describe(args, model, f" ({len(data.train)} train samples)"), rank == 0)
        stage = PipelineStage(module, rank, 2, device, input_args=example_in, output_args=example_out)
        schedule = SCHEDULES[args.schedule](stage, n_microbatches=args.micro_batches, loss_fn=F.cross_entropy)
        run = StageRun(args, rank, device, module, optimizer, schedule, step)
        opts = {"num_workers": args.num_workers, "pin_memory": args.pin_memory}
        # drop_last: every step must have the shapes of the first (the stages agreed on them then).
        train_loader = make_loader(data.train, args.batch_size, shuffle=True, seed=args.seed, drop_last=True, **opts)
        if len(train_loader) == 0:
            raise UsageError(f"--batch-size {args.batch_size} exceeds the {len(data.train)} training samples")
        telemetry.plan(planned_steps(args, len(train_loader), first_epoch, step), done=step)
        for epoch in range(first_epoch, args.epochs + 1):
            if should_stop(args, run.step):
                break
            started = time.perf_counter()
            run.train_epoch(train_loader, epoch)
            line = f"epoch {epoch} done: step {run.step} time {time.perf_counter() - started:.1f}s"
            val = (
                None
                if data.val is None
                else run.evaluate(make_loader(data.val, args.batch_size, shuffle=False, **opts))
            )
            if val is not None:
                telemetry.log(step=run.step, val_loss=val[0], val_acc=val[1], epoch=epoch)
                line += f" val_loss {val[0]:.4f} val_acc {val[1]:.4f}"
            say(line, run.last)
            if not args.no_checkpoint:
                save_merged(args, module, optimizer, epoch, run.step)
        test = (
            None if data.test is None else run.evaluate(make_loader(data.test, args.batch_size, shuffle=False, **opts))
        )
        if test is not None:
            telemetry.log(step=run.step, test_loss=test[0], test_acc=test[1])
            say(f"test_loss {test[0]:.4f} test_acc {test[1]:.4f}", run.last)
        timing = run.timing()
        if timing:
            say(timing, run.last)
        dist.barrier()  # leave together, after rank 0 has written the last checkpoint (see trainers.ddp)
        del run, schedule, stage
    finally:
        dist.destroy_process_group()
    return 0


def dump_step(
    directory: Path, rank: int, module: nn.Module, x: torch.Tensor | None, y: torch.Tensor, loss: float | None
) -> None:
    """This stage's view of one step before the update: for checking against the unsplit model."""
    private_dirs(directory)
    state = {
        "params": {n: p.detach() for n, p in module.named_parameters()},
        "grads": {n: p.grad for n, p in module.named_parameters() if p.grad is not None},
        "x": x,
        "y": y,
        "loss": loss,
    }
    torch.save(to_cpu(state), directory / f"stage{rank}.pt")
