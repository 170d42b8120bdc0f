"""TensorBoard's ``SummaryWriter.add_scalar``/``add_scalars`` (torch.utils.tensorboard and tensorboardX)."""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, numbers, report_after

SOURCE = "tensorboard"
_reporter: Reporter | None = None
_reader = LazyNumber()
_inside = threading.local()  # one writer method calling another reports once


def hook(module: ModuleType) -> None:
    global _reporter
    cls = getattr(module, "SummaryWriter", None)
    if cls is None or getattr(cls.add_scalar, "_gpumon", False):
        return
    if _reporter is None:
        _reporter = Reporter(SOURCE)
    reporter = _reporter

    def scalar(*args: Any, **kwargs: Any) -> None:
        tag, value = _arg(args, kwargs, 0, "tag"), _arg(args, kwargs, 1, "scalar_value")
        reporter.metrics(numbers({str(tag): value}, _reader), _step(_arg(args, kwargs, 2, "global_step")))

    def scalars(*args: Any, **kwargs: Any) -> None:
        main_tag, values = _arg(args, kwargs, 0, "main_tag"), _arg(args, kwargs, 1, "tag_scalar_dict")
        if isinstance(values, dict):
            step = _step(_arg(args, kwargs, 2, "global_step"))
            reporter.metrics(numbers(values, _reader, prefix=f"{main_tag}/"), step)

    report_after(cls, "add_scalar", SOURCE, scalar, _inside)
    report_after(cls, "add_scalars", SOURCE, scalars, _inside)


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _step(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = _reader.read("global_step", value) if value is not None else None
    return int(number) if number is not None and number == number else None
