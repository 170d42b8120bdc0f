"""Ray Train: what a worker hands ``ray.train.report(metrics)`` becomes that rank's ``metrics`` (source ``ray.train``).

Train V2 (Ray's default since 2.50) sends ``ray.train.report`` to the worker's ``TrainContext.report``; Train V1
(``RAY_TRAIN_V2_ENABLED=0``) to its ``_TrainSession.report``. The method is wrapped on the class, so a script
that did ``from ray.train import report`` is seen too. Each worker reports as the rank it is; a worker that is
no rank of the run (a Tune trial, whose results the Tune callback writes) reports nothing here.
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import Any

from gpumon import telemetry
from gpumon.telemetry import phases, ray_workers
from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, numbers, report_after

SOURCE = "ray.train"
CLASSES = ("TrainContext", "_TrainSession")  # Train V2's worker context, Train V1's session
_reporter: Reporter | None = None
_reader = LazyNumber()
_inside = threading.local()
_quiet: dict[int, bool] = {}  # pid -> this process is no rank of the run (decided at its first report)


def hook(module: ModuleType) -> None:
    for name in CLASSES:
        method = getattr(getattr(module, name, None), "report", None)
        if method is not None and not getattr(method, "_gpumon", False):
            report_after(getattr(module, name), "report", SOURCE, _reported, _inside)
            # a report with a checkpoint persists it (seconds, to the run's storage): the ledger's checkpoint time
            phases.wrap_save(getattr(module, name), "report", "ray.train.report", when=_with_checkpoint)


def _with_checkpoint(context: Any, metrics: Any = None, checkpoint: Any = None, *args: Any, **kwargs: Any) -> bool:
    return checkpoint is not None


def _reported(metrics: Any = None, *args: Any, **kwargs: Any) -> None:
    global _reporter
    pid = os.getpid()
    if pid not in _quiet:
        _quiet[pid] = ray_workers.quiet(telemetry.run_dir())
    if _quiet[pid] or not isinstance(metrics, dict):
        return
    if _reporter is None:
        _reporter = Reporter(SOURCE)
    telemetry.flush_steps()  # a worker ends without atexit: its steps so far are written at each report
    # Reports are few (an epoch, an evaluation): each is written, with the optimizer steps taken so far.
    _reporter.metrics(numbers(metrics, _reader), telemetry.steps_taken(), force=True)
