"""What a run died of, as data: the kinds, ``Failure`` and ``Collective``, and the exception event as text.

``classifier.classify`` makes a Failure of a run's error text, with the detectors in ``detect``;
``Failure.text`` always keeps that text unchanged, so nothing is hidden.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpumon.core.doctor.oom import MemoryNumbers

KINDS = (
    "cuda_oom", "host_oom", "device_assert", "cudnn", "nccl", "nccl_timeout", "shape", "import", "no_gpu",
    "checkpoint", "no_launcher", "removed_api", "worker", "killed", "exit", "stopped", "unknown",
    *(f"slurm_{end}" for end in ("timeout", "out_of_memory", "node_fail", "preempted", "boot_fail", "deadline")),
)  # fmt: skip
# Kinds told by the run's state (a stop) or by Slurm's end state (doctor/slurm_end.py), never by a log's text.
STATE_KINDS = frozenset(kind for kind in KINDS if kind == "stopped" or kind.startswith("slurm_"))


@dataclass(frozen=True)
class Collective:
    """A timed-out collective as the NCCL watchdog (or gloo) reported it."""

    backend: str  # "nccl" or "gloo"
    timeout_ms: int | None = None
    ran_ms: int | None = None
    ranks: tuple[int, ...] = ()  # the ranks that reported a timeout
    ops: tuple[str, ...] = ()  # distinct "ALLREDUCE(SeqNum=808)" seen: more than one means the ranks diverged


@dataclass(frozen=True)
class Failure:
    kind: str  # one of KINDS
    title: str  # one line
    text: str  # the classified text, unchanged
    evidence: tuple[str, ...] = ()  # the lines that decided the kind
    detail: str = ""  # what it usually means, how to confirm it
    memory: MemoryNumbers | None = None  # cuda_oom / host_oom numbers
    shapes: tuple[str, str] | None = None  # shape: the two sizes that disagree
    collective: Collective | None = None  # nccl_timeout
    module: str = ""  # import: the module that could not be imported
    rank: int | None = None
    exit_code: int | None = None
    signal: str | None = None  # "SIGKILL"
    worker: int | None = None  # worker: the DataLoader worker that raised
    sample: int | None = None  # worker: the sample index its traceback shows
    snapshot: dict[str, Any] | None = None  # cuda_oom: the allocator's snapshot kept at it (oom_blocks.py)

    @property
    def shown_evidence(self) -> tuple[str, ...]:
        """The first evidence lines worth printing: stripped, and not the title again (often the line itself)."""
        return tuple(line.strip() for line in self.evidence[:3] if line.strip() != self.title)


def exception_text(event: Mapping[str, Any]) -> str:
    """An ``exception`` event (docs/events.md) as the traceback Python would have printed."""
    trace = str(event.get("traceback") or "")
    head = "Traceback (most recent call last):\n" + trace if trace else ""
    message = str(event.get("message") or "")
    return f"{head}{event.get('exc_type', 'Exception')}" + (f": {message}" if message else "")
