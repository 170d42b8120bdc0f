"""Known pauses in a rank's stepping: an evaluation (a model switched to eval mode), a checkpoint save, the exit.

The supervisor's stall rule (``core/runs/supervision/stall.py``) gives a rank in such a pause longer before it calls the
run stalled, and the run's time ledger (``core/runs/reading/ledger.py``) counts them apart from the steps.
``model.eval()`` and ``model.train()`` (``Module.train(False/True)``) cover plain loops, Lightning's validation loop
and HF Trainer's evaluate, which all switch the model; a long ``torch.no_grad()``/``inference_mode()`` stretch
between steps is an evaluation too (said when it ends). Checkpoints: ``torch.save``, ``torch.distributed.checkpoint``'s
``save``/``async_save``, safetensors' ``save_file``/``save``, Lightning's ``Trainer.save_checkpoint`` and HF's
``Trainer._save_checkpoint`` (the outermost of nested ones). Only a process that is already a rank writes, and only
when a model's mode changes (the outermost call: ``train()`` recurses into every submodule) or a save or a long
no-grad stretch ends, so the cost is a few events per epoch.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpumon import telemetry
from gpumon.telemetry import ranks
from gpumon.telemetry.imports import when_imported

# A no-grad stretch at least this long, and twice the latest step, is an evaluation: shorter ones are a step's own
# (clip_grad_norm_, an EMA update, a metric), which the step's time holds.
EVAL_MIN_S = 0.05
# Where a checkpoint is saved with no torch.save underneath (or one we name better): module -> its save functions.
SAVES = {
    "torch.distributed.checkpoint": ("save", "async_save", "save_state_dict"),
    "safetensors.torch": ("save_file", "save"),
}


class _State:
    mode = ""  # the latest phase: "train" or "eval"
    depth = 0  # nested ``train()`` calls (it recurses into submodules): only the outermost counts
    changes = 0  # outermost mode changes so far (flops.py: an evaluation inside its counted step spoils it)
    saving = 0  # nested saves (HF's _save_checkpoint calls safetensors' and torch.save): only the outermost counts
    step_s: float | None = None  # the latest recorded step's seconds (steps.py sets it)


_state = _State()
state = _state  # the same object, public: steps.py sets its step_s


def changes() -> int:
    """How many times a model's mode changed (train/eval) in this process so far."""
    return _state.changes


def _emit(phase: str, **fields: Any) -> None:
    if ranks.decided() is None:
        return  # not a rank (yet): its first step decides, and a pause before it is not judged
    with contextlib.suppress(Exception):  # telemetry never fails a run
        telemetry.event("phase", phase=phase, **fields)


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
    wrap_save(torch, "save", "torch.save")
    for cls in (torch.no_grad, torch.inference_mode):
        with contextlib.suppress(AttributeError, TypeError):
            _watch_grad_off(cls)
    for name, functions in SAVES.items():
        when_imported(name, functools.partial(_wrap_saves, functions=functions))


def _wrap_saves(module: ModuleType, functions: tuple[str, ...]) -> None:
    for function in functions:
        if callable(getattr(module, function, None)):
            wrap_save(module, function, f"{module.__name__}.{function}")


def wrap_save(owner: Any, name: str, how: str, when: Callable[..., bool] | None = None) -> None:
    """Wrap ``owner.name`` (a function that saves a checkpoint) to say the save's start and end (``phase`` save,
    then the phase it left, with ``how``); a save inside another (nested) says nothing more. ``when(*args,
    **kwargs)``: only such calls save (a report that may carry a checkpoint)."""
    original: Callable[..., Any] = getattr(owner, name)
    if getattr(original, "_gpumon_save", False):
        return

    @functools.wraps(original)
    def save(*args: Any, **kwargs: Any) -> Any:
        if when is not None and not when(*args, **kwargs):
            return original(*args, **kwargs)
        outer = _state.saving == 0
        _state.saving += 1
        if outer:
            _emit("save", how=how)
        try:
            return original(*args, **kwargs)
        finally:
            _state.saving -= 1
            if outer:
                _emit(_state.mode or "train", after="save")  # back to what it was doing

    save._gpumon_save = True  # type: ignore[attr-defined]
    setattr(owner, name, save)


class _GradOff(threading.local):
    depth = 0  # nested no-grad blocks in this thread: only the outermost is timed
    since = 0.0


_off = _GradOff()


def _watch_grad_off(cls: Any) -> None:
    """Time the outermost ``with torch.no_grad():`` (or ``inference_mode``, or a function decorated with either): two
    clock reads per block; an event only when a long one ends outside eval mode (``eval()`` said that already)."""
    enter, leave = cls.__enter__, cls.__exit__

    @functools.wraps(enter)
    def __enter__(self: Any) -> Any:
        if _off.depth == 0:
            _off.since = time.time()
        _off.depth += 1
        return enter(self)

    @functools.wraps(leave)
    def __exit__(self: Any, *exc: Any) -> Any:
        try:
            return leave(self, *exc)
        finally:
            _off.depth = max(0, _off.depth - 1)
            if _off.depth == 0:
                lasted = time.time() - _off.since
                step = _state.step_s
                if lasted >= EVAL_MIN_S and step is not None and lasted >= 2 * step and _state.mode != "eval":
                    _emit("eval", since=round(_off.since, 6), how="no_grad")

    cls.__enter__, cls.__exit__ = __enter__, __exit__
