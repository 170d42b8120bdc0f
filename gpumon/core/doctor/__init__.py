"""The doctor: why a run failed and what to change, from the run's own error text and telemetry.

Pure Python: no torch, no Textual. ``classify`` names the failure, ``advise`` ranks the changes.

The names below load on first use: importing one of the doctor's modules (the leak watch every ``gpumon runs``
reads, the supervisor's stall texts) does not pay for the classifier and the advice (issue 35).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumon.core.doctor.advice import advise
    from gpumon.core.doctor.advice_types import Advice, Context
    from gpumon.core.doctor.classifier import classify
    from gpumon.core.doctor.failures import KINDS, Collective, Failure, exception_text
    from gpumon.core.doctor.oom import MemoryNumbers, fmt_size

_HOME = {
    "advise": "advice",
    "Advice": "advice_types",
    "Context": "advice_types",
    "classify": "classifier",
    "KINDS": "failures",
    "Collective": "failures",
    "Failure": "failures",
    "exception_text": "failures",
    "MemoryNumbers": "oom",
    "fmt_size": "oom",
}

__all__ = [
    "KINDS",
    "Advice",
    "Collective",
    "Context",
    "Failure",
    "MemoryNumbers",
    "advise",
    "classify",
    "exception_text",
    "fmt_size",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:  # a submodule not imported yet: the import system imports it after this
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
