"""Lightning: every ``Trainer`` gets a callback that reads what ``self.log(...)`` logged and the total steps."""

from __future__ import annotations

import functools
import importlib
import math
from types import ModuleType
from typing import Any

from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, guarded, numbers

SOURCE = "lightning"


def hook(module: ModuleType) -> None:
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls.__init__, "_gpumon", False):
        return
    base = module.__name__.split(".trainer")[0]  # lightning.pytorch or pytorch_lightning
    callback_cls = importlib.import_module(f"{base}.callbacks").Callback
    reporter, reader = Reporter(SOURCE), LazyNumber()

    class GpumonCallback(callback_cls):  # type: ignore[misc, valid-type]
        """Added to every Trainer by gpumon's telemetry (the script is unchanged)."""

        total: int | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.total = guarded(SOURCE, _total)(trainer)
            reporter.progress(self.total, trainer.global_step, force=True)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            batch_end(self, trainer)

        def _batch_end(self, trainer: Any) -> None:
            step = trainer.global_step
            last = self.total is not None and step >= self.total  # the last step's values are always read
            reporter.progress(self.total, step)
            if last or reporter.due():
                # On a step, Lightning hands the values logged at this step (no epoch reduction, no
                # collective): what its own progress bar reads after every batch.
                values = numbers(trainer.callback_metrics, reader)
                reporter.metrics(values, step, force=last)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            reporter.progress(self.total, trainer.global_step, force=True)

    batch_end = guarded(SOURCE, GpumonCallback._batch_end)  # wrapped once, not per batch
    original = trainer_cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        guarded(SOURCE, self.callbacks.append)(GpumonCallback())

    init._gpumon = True  # type: ignore[attr-defined]
    trainer_cls.__init__ = init


def _total(trainer: Any) -> int | None:
    total = trainer.estimated_stepping_batches
    return int(total) if isinstance(total, int | float) and math.isfinite(total) and total > 0 else None
