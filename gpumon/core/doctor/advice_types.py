"""What the advice rules share: the Advice they return, the Context they read, the Scored list they build."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise


@dataclass(frozen=True)
class Advice:
    key: str  # stable id: "batch_size", "expandable_segments", ...
    title: str
    why: str  # the evidence, numbers included
    change: str  # the concrete code or environment change


@dataclass(frozen=True)
class Context:
    """What else is known about the run; every field is optional."""

    batch_size: int | None = None  # per process, from the run's arguments
    amp: bool | None = None  # mixed precision already on
    checkpointing: bool | None = None  # gradient checkpointing already on
    num_workers: int | None = None
    pin_memory: bool | None = None
    world_size: int | None = None
    allocated: tuple[int, ...] = ()  # per-step CUDA allocated (or CPU heap) bytes, oldest first
    rss: tuple[int, ...] = ()  # per-step host RSS bytes
    leak_slope: float | None = None  # bytes per step, from the leak detector, when it saw a trend
    ceiling: str = ""  # a limit below the host's memory that capped the rank: "RLIMIT_AS 3.0 GiB (...)"
    ceiling_source: str = ""  # ceiling.py's key: "as", "data", "cgroup"
    held: str = ""  # what the last census named growing: "`cache` in train.py:12 keeps ...: 61 x 32 MiB"
    held_fix: str = ""  # that cause's fix
    workers: bool | None = None  # processes beside the ranks were seen (DataLoader workers?); None: unknown
    stall: str = ""  # the run stalled before it failed: where its ranks waited (runs/supervision/stall.py)
    stall_ranks: str = ""  # the ranks the others waited for: "1"
    run_id: str = ""  # the advised commands name the run (gpumon logs ID --rank 1)

    @classmethod
    def from_argv(cls, argv: Sequence[str], **known: object) -> Context:
        """Read the usual flags (--batch-size 64, --per_device_train_batch_size=8, --bf16, --num-workers 4)."""
        text = " ".join(argv)

        def number(names: str) -> int | None:
            found = re.search(rf"--(?:{names})[ =](\d+)\b", text)
            return int(found.group(1)) if found else None

        amp = re.search(r"--(?:amp|fp16|bf16|use[-_]amp|autocast)\b|--(?:mixed[-_])?precision[ =]\S*16", text)
        fields: dict[str, object] = {
            "batch_size": number(r"batch[-_]size|bs|(?:per[-_]device[-_]train|train|micro)[-_]batch[-_]size"),
            "amp": bool(amp) or None,
            "checkpointing": bool(re.search(r"--(?:gradient|grad|activation)[-_](?:checkpointing|ckpt)\b", text))
            or None,
            "num_workers": number(r"num[-_]workers|workers"),
            "pin_memory": bool(re.search(r"--pin[-_]memory\b", text)) or None,
        }
        return cls(**{**fields, **known})  # type: ignore[arg-type]

    @staticmethod
    def growth(series: tuple[int, ...]) -> tuple[int, int, int] | None:
        """(first, last, steps) when a series rose steadily: most steps up and a clear net rise."""
        if len(series) < 5:
            return None
        ups = sum(b > a for a, b in pairwise(series))
        rise = series[-1] - series[0]
        if ups < 0.6 * (len(series) - 1) or rise < max(16 * 1024**2, 0.05 * series[0]):
            return None
        return series[0], series[-1], len(series)


Scored = list[tuple[int, Advice]]
