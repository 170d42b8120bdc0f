"""Atomic epoch checkpoints, --resume, and --init-from/--freeze transfer learning."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpumon.core.safefs import private_dirs
from trainers.cli import UsageError

NAME = re.compile(r"^epoch(\d+)\.pt$")


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DistributedDataParallel, DataParallel or a two-device wrapper (all use ``.module``)."""
    inner = getattr(model, "module", None)
    return unwrap(inner) if isinstance(inner, nn.Module) else model


def save(directory: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``directory/epoch<N>.pt`` atomically: readers see the old file or the whole new one."""
    private_dirs(directory)  # checkpoints are the user's model and data: not for every user of the host
    target = directory / f"epoch{state['epoch']:04d}.pt"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pt", dir=directory)  # same filesystem as the target
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer | None, epoch: int, step: int) -> dict[str, Any]:
    return {
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "epoch": epoch,
        "global_step": step,
    }


def latest(directory: Path) -> Path | None:
    """The checkpoint with the highest epoch number in ``directory``, if any."""
    if not directory.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := NAME.match(p.name))]
    return max(found)[1] if found else None


def load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UsageError(f"checkpoint {path} not found")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any failure to read means "not our checkpoint"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot read checkpoint {path} ({type(exc).__name__}: {first})") from exc
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise UsageError(f"{path} is not a trainers checkpoint (no 'model' state dict)")
    return state


def restore_model(model: nn.Module, state: dict[str, Any], path: Path) -> None:
    """Load a --resume checkpoint's weights strictly: resuming into a different model is a usage error."""
    own, saved = model.state_dict(), state["model"]
    missing = [k for k in own if k not in saved]
    unexpected = [k for k in saved if k not in own]
    reshaped = [k for k in own if k in saved and own[k].shape != saved[k].shape]
    if missing or unexpected or reshaped:
        example = (missing + unexpected + reshaped)[0]
        raise UsageError(
            f"--resume {path} holds another model ({len(missing)} tensors missing, {len(unexpected)} extra, "
            f"{len(reshaped)} of other shapes, e.g. {example}): check --arch/--preset/--norm, or use --init-from"
        )
    model.load_state_dict(saved)


def restore_optimizer(optimizer: torch.optim.Optimizer, saved: dict[str, Any] | None, path: Path) -> str:
    """Load ``saved`` optimizer state; a mismatch (say --freeze changed since the save) is a usage error."""
    if saved is None:
        return " (no optimizer state in it: the optimizer starts fresh)"
    try:
        optimizer.load_state_dict(saved)
    except ValueError as exc:
        raise UsageError(
            f"--resume {path}: its optimizer state does not fit this run's trainable parameters ({exc})"
        ) from None
    return ""


def init_from(model: nn.Module, path: Path) -> str:
    """Load matching weights from ``path``; keys whose shapes differ (e.g. a new head) are skipped and named."""
    source = load(path)["model"]
    own = model.state_dict()
    skipped = sorted(k for k, v in source.items() if k in own and own[k].shape != v.shape)
    unused = sorted(k for k in source if k not in own)
    usable = {k: v for k, v in source.items() if k in own and k not in skipped}
    if not usable:
        raise UsageError(f"--init-from {path}: no tensor matches this model")
    model.load_state_dict(usable, strict=False)
    missing = sorted(k for k in own if k not in usable)
    text = f"init-from {path}: loaded {len(usable)} tensors"
    if skipped:
        text += f"; skipped {len(skipped)} with different shapes: {', '.join(skipped)}"
    if missing:
        text += f"; {len(missing)} left as initialised"
    if unused:
        text += f"; {len(unused)} not in this model"
    return text


def freeze(model: nn.Module, prefixes: list[str]) -> str:
    """Set requires_grad=False on parameters whose names start with any prefix; say how many."""
    unmatched = [p for p in prefixes if not any(n.startswith(p) for n, _ in model.named_parameters())]
    if unmatched:
        names = sorted({n.split(".")[0] for n, _ in model.named_parameters()})
        raise UsageError(f"--freeze {' '.join(unmatched)}: no parameter starts with that; top-level names: {names}")
    tensors = params = total = 0
    for name, param in model.named_parameters():
        total += param.numel()
        if any(name.startswith(p) for p in prefixes):
            param.requires_grad_(False)
            tensors += 1
            params += param.numel()
    return f"frozen {params} of {total} parameters ({tensors} tensors) under {' '.join(prefixes)}"
