"""One memory series' verdict: the detector's trend, its run-out projection, and whether that is an alarm.

States, mildest first: ``warmup`` (too few samples), ``ok``, ``growth`` (memory grows per iteration
but would fill memory only after the run's expected end: the doctor reports it, nothing alarms),
``growing`` (a trend being confirmed that fills memory before the run ends: the row's warning colour)
and ``leak`` (confirmed: the alert). horizon.py decides between ``growth`` and the other two; the
detector (leak.py) knows only the trend. A cause a census named (``cause``) makes any growth a warning
and a leak in words; only the horizon's ``leak`` wakes the user's channels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from gpumon.core.format import size

STATES = ("warmup", "ok", "growth", "growing", "leak")
SEVERITY = {state: rank for rank, state in enumerate(STATES)}
TRENDS = ("growing", "leak")  # the detector's own verdicts for memory that grows


@dataclass(frozen=True)
class LeakState:
    state: str = "warmup"  # one of STATES
    slope: float = 0.0  # bytes per iteration, Theil-Sen over the window
    strength: float = 0.0  # (rising pairs - falling pairs) / pairs: -1..1, Kendall-tau-like
    noise: float | None = None  # robust noise of one sample (bytes), when it was needed
    current: float | None = None  # the latest value (bytes)
    capacity: int | None = None  # device or host memory (bytes)
    runs_out_at: int | None = None  # projected iteration at which the value reaches capacity
    samples: int = 0  # samples seen, warm-up included
    step: int | None = None  # the latest step
    since: int | None = None  # the step at which this state began
    memory: str = ""  # what the series measures on a CUDA rank: "gpu" (allocated) or "host" (live heap)
    cycle: int | None = None  # iterations between falls when memory is freed periodically (a sawtooth)
    peak: float | None = None  # the last cycle's peak (bytes)
    peak_slope: float | None = None  # bytes per iteration along the peaks; ~0: they are flat
    cycle_limit: int | None = None  # a cycle this many iterations long would fill ``capacity`` from its low
    trend: str = ""  # the detector's verdict ("growing", "leak") once judged against the run's end
    ends_at: int | None = None  # the step the run is expected to reach (its plan, or 24 h at its pace)
    ends_by: str = ""  # how that end was found: "its plan of 520 steps", "24 h at its pace of 31 steps/s"
    ended_at: int | None = None  # the step the run ended at, once it has ended (``ends_at`` is then a horizon)
    ceiling: str = ""  # what ``capacity`` is: "RLIMIT_AS 3.0 GiB (...)", "the host's 23.5 GiB" (ceiling.py)
    cause: str = ""  # what the rank's latest census pair named: "`running_loss` in train.py:90 (...) keeps ..."

    @property
    def warning(self) -> bool:
        """Memory that fills before the run ends, or a leak a census named: the row's and the GPU panel's colour."""
        return self.state in TRENDS or (self.grows and bool(self.cause))

    @property
    def alarm(self) -> bool:
        """Worth waking someone for: the supervisor's alert, the app's notification, --on-alert. The horizon
        alone decides it: a named leak that fills memory only after the run's end wakes nobody."""
        return self.state == "leak"

    @property
    def grows(self) -> bool:
        """Memory grows per iteration, whether or not it threatens the run."""
        return self.state == "growth" or self.state in TRENDS

    @property
    def verdict(self) -> str:
        """The state in words: a growth whose cause a census named is a leak, whether or not it ends the run."""
        return "leak" if self.grows and self.cause else self.state

    def describe(self, label: bool = True) -> str:
        """One line: "leak: +5.6 KiB/iter (strength 0.97), runs out at iteration ~4,100,000" (without
        ``label``: from the "+", for a line that says "leak" already)."""
        if self.state in ("warmup", "ok") and not self.samples:
            return "no memory samples"
        memory = {"gpu": "GPU memory ", "host": "host memory "}.get(self.memory, "")
        text = f"{memory}{self.verdict}: " if label else ""
        text += f"{'+' if self.slope >= 0 else '-'}{size(abs(self.slope))}/iter"
        if self.cycle and self.peak is not None and self.grows:  # a healthy loop's churn is no news
            per_cycle = (self.peak_slope or 0) * self.cycle
            peaks = "flat" if per_cycle <= 0 else f"rising +{size(per_cycle)} per cycle"
            text += (
                f" within each cycle of ~{self.cycle:,} iterations, released at its end"
                f" (a sawtooth: peak {size(self.peak)}, peaks {peaks})"
            )
        text += f" (strength {self.strength:.2f})"
        if self.grows and self.since is not None:
            text += f" since step {self.since}"
        where = {"gpu": "the GPU fills", "host": "host memory fills"}.get(self.memory, "runs out")
        against = f" against {self.ceiling}" if self.ceiling else ""
        end = f"the run's expected end at step ~{self.ends_at:,} ({self.ends_by})" if self.ends_at else ""
        if self.ends_at and self.ended_at is not None:  # ended: no end is expected any more, the horizon stays
            end = f"step ~{self.ends_at:,} ({self.ends_by}; the run ended at step {self.ended_at:,})"
        quiet = ": no threat to this run" if self.cause else ": no alarm"  # a named leak is no less one for it
        if self.state == "growth" and self.runs_out_at is None:  # a sawtooth whose peaks stay below memory
            fill = f"fill {self.ceiling}" if self.ceiling else "fill memory"
            if self.cycle_limit is None:
                return text + f"; its peaks stay below memory{quiet}"
            return text + f"; a cycle would {fill} only if it lasted ~{self.cycle_limit:,} iterations{quiet}"
        if self.state == "growth":
            after = end or "its end"
            return text + f"; {where} only at iteration ~{self.runs_out_at or 0:,}{against}, after {after}{quiet}"
        if self.warning and self.runs_out_at is not None:
            text += f", {where} at iteration ~{self.runs_out_at:,}{against}"
            if end:
                text += f", before {end}"
        return text


@cache
def _state_fields() -> frozenset[str]:
    return frozenset(f.name for f in fields(LeakState))


def restore_states(recorded: Mapping[str, Any] | None) -> dict[tuple[int, str], LeakState]:
    """``record_states`` (leak.py) read back; a malformed entry is left out. Here, not in leak.py: the run list
    reads ended runs' verdicts without loading the detector (issue 35)."""
    out: dict[tuple[int, str], LeakState] = {}
    names = _state_fields()
    for key, data in (recorded or {}).items():
        rank, _, memory = str(key).partition(":")
        if rank.lstrip("-").isdigit() and isinstance(data, dict):
            try:
                out[(int(rank), memory)] = LeakState(**{k: v for k, v in data.items() if k in names})
            except TypeError:
                continue
    return out
