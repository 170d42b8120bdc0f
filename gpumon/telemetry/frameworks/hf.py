"""Hugging Face ``Trainer``: every Trainer gets a callback that reads its logs and ``max_steps``."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, guarded, numbers

SOURCE = "hf"
# The Trainer's closing log: an average over the run and timings, not the loss at a step.
SUMMARY_KEYS = ("train_loss", "train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos")


def hook(module: ModuleType) -> None:
    trainer_cls = getattr(module, "Trainer", None)
    from transformers.trainer_callback import TrainerCallback

    if trainer_cls is None or getattr(trainer_cls.__init__, "_gpumon", False):
        return
    reporter, reader = Reporter(SOURCE), LazyNumber()
    total, read_logs = guarded(SOURCE, _total), guarded(SOURCE, _logs)  # wrapped once, not per step

    class GpumonCallback(TrainerCallback):
        """Added to every Trainer by gpumon's telemetry (the script is unchanged)."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            total(reporter, state, True)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            total(reporter, state, False)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            total(reporter, state, True)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            read_logs(reporter, reader, state, logs)

    original = trainer_cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        guarded(SOURCE, self.add_callback)(GpumonCallback())

    init._gpumon = True  # type: ignore[attr-defined]
    trainer_cls.__init__ = init


def _total(reporter: Reporter, state: Any, force: bool) -> None:
    total = getattr(state, "max_steps", None)
    if isinstance(total, int):
        reporter.progress(total, getattr(state, "global_step", None), force=force)


def _logs(reporter: Reporter, reader: LazyNumber, state: Any, logs: Any) -> None:
    if not isinstance(logs, dict):
        return
    if "train_runtime" in logs:
        logs = {k: v for k, v in logs.items() if k not in SUMMARY_KEYS}
    step = getattr(state, "global_step", None)
    reporter.metrics(numbers(logs, reader), step if isinstance(step, int) else None)
