"""Hugging Face ``Trainer``: every Trainer gets a callback that reads its logs and ``max_steps``."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from gpumon.telemetry import phases
from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, guarded, numbers

SOURCE = "hf"
# The Trainer's closing log: an average over the run and timings, not the loss at a step.
SUMMARY_KEYS = ("train_loss", "train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos")
_reporter: Reporter | None = None
_reader = LazyNumber()
_class: type | None = None


def hook(module: ModuleType) -> None:
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls.__init__, "_gpumon", False):
        return
    original = trainer_cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        guarded(SOURCE, lambda: self.add_callback(new_callback()))()

    init._gpumon = True  # type: ignore[attr-defined]
    trainer_cls.__init__ = init
    if callable(getattr(trainer_cls, "_save_checkpoint", None)):  # its checkpoints' time (phases.py)
        phases.wrap_save(trainer_cls, "_save_checkpoint", "hf")


def new_callback() -> Any:
    """Our callback; picklable by this name (a search pickles the trainer), made again where it is unpickled."""
    global _reporter, _class
    if _reporter is None:
        _reporter = Reporter(SOURCE)
    if _class is None:
        _class = _callback_class()
    return _class()


def _callback_class() -> type:
    from transformers.trainer_callback import TrainerCallback

    total, read_logs = guarded(SOURCE, _total), guarded(SOURCE, _logs)  # wrapped once, not per step

    class GpumonCallback(TrainerCallback):
        """Added to every Trainer by gpumon's telemetry (the script is unchanged)."""

        def __reduce__(self) -> tuple[Any, tuple[()]]:
            return new_callback, ()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            total(state, True, False)  # a resumed run's global_step is loaded after this hook (transformers 5)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            total(state, False)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            total(state, True)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            read_logs(state, logs)

    return GpumonCallback


def _total(state: Any, force: bool, done: bool = True) -> None:
    """``max_steps`` and, with ``done``, ``global_step``: the whole job's, a resumed one's counting from its
    checkpoint's (gpumon reads progress and STEP from it)."""
    total = getattr(state, "max_steps", None)
    if isinstance(total, int) and _reporter is not None:
        _reporter.progress(total, getattr(state, "global_step", None) if done else None, force=force)


def _logs(state: Any, logs: Any) -> None:
    if not isinstance(logs, dict) or _reporter is None:
        return
    if "train_runtime" in logs:
        logs = {k: v for k, v in logs.items() if k not in SUMMARY_KEYS}
    step = getattr(state, "global_step", None)
    _reporter.metrics(numbers(logs, _reader), step if isinstance(step, int) else None)
