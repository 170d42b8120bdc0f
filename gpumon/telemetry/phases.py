"""Known pauses in a rank's stepping: an evaluation (a model switched to eval mode), a checkpoint save, the exit.

The supervisor's stall rule (``core/runs/supervision/stall.py``) gives a rank in such a pause longer before it calls the
run stalled. ``model.eval()`` and ``model.train()`` (``Module.train(False/True)``) cover plain loops,
Lightning's validation loop and HF Trainer's evaluate, which all switch the model; ``torch.save`` covers
checkpoints. Only a process that is already a rank writes, and only when a model's mode changes (the
outermost call: ``train()`` recurses into every submodule), so the cost is a few events per epoch.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
from types import ModuleType
from typing import Any

from gpumon import telemetry
from gpumon.telemetry import ranks


class _State:
    mode = ""  # the latest phase: "train" or "eval"
    depth = 0  # nested ``train()`` calls (it recurses into submodules): only the outermost counts
    changes = 0  # outermost mode changes so far (flops.py: an evaluation inside its counted step spoils it)


_state = _State()


def changes() -> int:
    """How many times a model's mode changed (train/eval) in this process so far."""
    return _state.changes


def _emit(phase: str) -> None:
    if ranks.decided() is None:
        return  # not a rank (yet): its first step decides, and a pause before it is not judged
    with contextlib.suppress(Exception):  # telemetry never fails a run
        telemetry.event("phase", phase=phase)


def _differs(module: Any, mode: bool) -> bool:
    """Whether ``train(mode)`` changes anything: a trainer may have evaluated only the inner model
    (``ddp.module.eval()``) and then calls ``ddp.train()``, whose own flag never changed."""
    try:
        return any(m.training != mode for m in module.modules())
    except Exception:  # noqa: BLE001 - a module whose modules() fails: judge by its own flag
        return bool(getattr(module, "training", None) != mode)


def hook(module: ModuleType) -> None:
    """Wrap ``torch.nn.Module.train`` and ``torch.save`` (after the script's own import of torch); say when the
    interpreter exits (its shutdown, a process group's or DataLoader's teardown, takes seconds under load)."""
    torch: Any = module
    atexit.register(_emit, "exit")
    module_cls = torch.nn.Module
    original_train = module_cls.train

    @functools.wraps(original_train)
    def train(self: Any, mode: bool = True) -> Any:
        # Only an outermost call that changes the module's mode counts: HF calls model.train() every step, and
        # Lightning restores train mode by setting ``training`` itself (no call: the next eval() is a change).
        outer = _state.depth == 0
        changed = outer and _differs(self, bool(mode))
        _state.depth += 1
        try:
            return original_train(self, mode)
        finally:
            _state.depth -= 1
            if outer and changed:
                _state.changes += 1
                _state.mode = "train" if mode else "eval"
                _emit(_state.mode)

    module_cls.train = train
    original_save = torch.save

    @functools.wraps(original_save)
    def save(*args: Any, **kwargs: Any) -> Any:
        _emit("save")
        try:
            return original_save(*args, **kwargs)
        finally:
            _emit(_state.mode or "train")  # back to what it was doing

    torch.save = save
