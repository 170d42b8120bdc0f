"""The doctor: why a run failed and what to change, from the run's own error text and telemetry.

Pure Python: no torch, no Textual. ``classify`` names the failure, ``advise`` ranks the changes.
"""

from gpumon.core.doctor.advice import advise
from gpumon.core.doctor.advice_types import Advice, Context
from gpumon.core.doctor.classifier import classify
from gpumon.core.doctor.failures import KINDS, Collective, Failure, exception_text
from gpumon.core.doctor.oom import MemoryNumbers, fmt_size

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
