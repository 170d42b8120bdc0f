"""Lightning: every ``Trainer`` gets a callback that reads what ``self.log(...)`` logged and the total steps.

Its default progress bar is Rich's when rich is installed, and Rich draws a live display only on a terminal:
into a log (a run's output is a pipe to its log file) it writes nothing until the run ends. There a Trainer
whose script chose no bar gets Lightning's TQDM bar instead, the one Lightning itself picks without rich
(frames on stdout that the log view draws as a terminal would); a bar the script passed is kept.
"""

from __future__ import annotations

import functools
import importlib
import math
from types import ModuleType
from typing import Any

from gpumon import telemetry
from gpumon.telemetry import phases
from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, guarded, numbers

SOURCE = "lightning"
BAR_SOURCE = "lightning progress bar"  # its own guard: a failure here leaves the metrics hook on
_reporter: Reporter | None = None
_reader = LazyNumber()
_classes: dict[str, type] = {}  # lightning.pytorch / pytorch_lightning -> our callback class
_bar_note = False  # the Rich bar was swapped for TQDM's and the run has not been told yet
BAR_NOTE = (
    "Lightning's progress bar is its TQDM bar here: the output is not a terminal, where its Rich bar writes "
    "nothing until the run ends"
)


def hook(module: ModuleType) -> None:
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls.__init__, "_gpumon", False):
        return
    base = module.__name__.split(".trainer")[0]  # lightning.pytorch or pytorch_lightning
    original = trainer_cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        guarded(SOURCE, lambda: self.callbacks.append(new_callback(base)))()
        guarded(BAR_SOURCE, plain_bar)(self, kwargs.get("callbacks"), base)

    init._gpumon = True  # type: ignore[attr-defined]
    trainer_cls.__init__ = init
    if callable(getattr(trainer_cls, "save_checkpoint", None)):  # its checkpoints' time (phases.py)
        phases.wrap_save(trainer_cls, "save_checkpoint", "lightning")


def plain_bar(trainer: Any, given: Any, base: str) -> None:
    """Lightning's TQDM bar in place of the Rich bar it added by default, where Rich would draw nothing live
    (Rich's own rule: not a terminal, or a dumb one; Jupyter draws). A bar in the script's ``callbacks`` stays."""
    bar = trainer.progress_bar_callback
    callbacks = importlib.import_module(f"{base}.callbacks")
    if type(bar) is not callbacks.RichProgressBar:
        return
    chosen = given if isinstance(given, list | tuple) else [given]
    if any(c is bar for c in chosen):
        return
    from rich import get_console  # imported already: Lightning's Rich bar is made of it

    console = get_console()
    if console.is_jupyter or (console.is_terminal and not console.is_dumb_terminal):
        return
    trainer.callbacks[next(i for i, c in enumerate(trainer.callbacks) if c is bar)] = callbacks.TQDMProgressBar()
    global _bar_note
    _bar_note = True  # said at the first training batch: a note now would make a process that trains nothing a rank


def new_callback(base: str) -> Any:
    """Our callback for the Lightning package ``base``; picklable by this name (``ddp_spawn`` pickles the
    trainer), and made again in the process that unpickles it."""
    global _reporter
    if _reporter is None:
        _reporter = Reporter(SOURCE)
    if base not in _classes:
        _classes[base] = _callback_class(importlib.import_module(f"{base}.callbacks").Callback, base)
    return _classes[base]()


def _callback_class(callback_cls: type, base: str) -> type:
    batch_end = guarded(SOURCE, _batch_end)  # wrapped once, not per batch
    start = guarded(SOURCE, _start)

    class GpumonCallback(callback_cls):
        """Added to every Trainer by gpumon's telemetry (the script is unchanged)."""

        total: int | None = None

        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return new_callback, (base,)

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            start(self, trainer)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            batch_end(self, trainer)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if _reporter is not None:
                _reporter.progress(self.total, trainer.global_step, force=True)

    return GpumonCallback


def _start(callback: Any, trainer: Any) -> None:
    total = trainer.estimated_stepping_batches
    callback.total = int(total) if isinstance(total, int | float) and math.isfinite(total) and total > 0 else None
    if _reporter is not None:
        _reporter.progress(callback.total, trainer.global_step, force=True)


def _batch_end(callback: Any, trainer: Any) -> None:
    global _bar_note
    reporter = _reporter
    if reporter is None:
        return
    if _bar_note:
        _bar_note = False
        telemetry.note(BAR_NOTE)
    step = trainer.global_step
    last = callback.total is not None and step >= callback.total  # the last step's values are always read
    reporter.progress(callback.total, step)
    if last or reporter.due():
        # On a step, Lightning hands the values logged at this step (no epoch reduction, no collective):
        # what its own progress bar reads after every batch.
        reporter.metrics(numbers(trainer.callback_metrics, _reader), step, force=last)
