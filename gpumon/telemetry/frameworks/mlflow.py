"""MLflow: ``log_metric``/``log_metrics`` (the fluent API and ``MlflowClient`` both end in the client's
``log_metric`` and ``log_batch``)."""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, numbers, report_after

SOURCE = "mlflow"
_inside = threading.local()


def hook(module: ModuleType) -> None:
    cls = getattr(module, "MlflowClient", None)
    if cls is None or getattr(cls.log_metric, "_gpumon", False):
        return
    reporter, reader = Reporter(SOURCE), LazyNumber()

    def metric(*args: Any, **kwargs: Any) -> None:  # (run_id, key, value, timestamp=None, step=None)
        key = args[1] if len(args) > 1 else kwargs.get("key")
        value = args[2] if len(args) > 2 else kwargs.get("value")
        step = args[4] if len(args) > 4 else kwargs.get("step")
        reporter.metrics(numbers({str(key): value}, reader), step if isinstance(step, int) else None)

    def batch(*args: Any, **kwargs: Any) -> None:  # (run_id, metrics=(), params=(), tags=())
        metrics = args[1] if len(args) > 1 else kwargs.get("metrics", ())
        values = {str(m.key): m.value for m in metrics or ()}
        steps = [m.step for m in metrics or () if isinstance(getattr(m, "step", None), int)]
        reporter.metrics(numbers(values, reader), max(steps) if steps else None)

    report_after(cls, "log_metric", SOURCE, metric, _inside)
    report_after(cls, "log_batch", SOURCE, batch, _inside)
