"""Weights & Biases: ``wandb.log(...)`` (``Run.log``), whatever its mode."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, guarded, numbers

SOURCE = "wandb"


def hook(module: ModuleType) -> None:
    cls = getattr(module, "Run", None)
    if cls is None or getattr(cls.log, "_gpumon", False):
        return
    reporter, reader = Reporter(SOURCE), LazyNumber()

    def log(*args: Any, **kwargs: Any) -> None:
        data = args[0] if args else kwargs.get("data")
        step = args[1] if len(args) > 1 else kwargs.get("step")
        if isinstance(data, dict):
            reporter.metrics(numbers(data, reader), step if isinstance(step, int) else None)

    original = cls.log
    safe = guarded(SOURCE, log)

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        safe(*args, **kwargs)
        return result

    method._gpumon = True  # type: ignore[attr-defined]
    cls.log = method
