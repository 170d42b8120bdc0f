"""How far a run is and when it ends: its total steps, the time per step, progress and ETA.

Folded from the run's events alongside the rest of its telemetry (``RunTelemetry.progress``):

- the pace: the lowest rank's steps per second by the wall clock over about its last two minutes
  (``series.Pace``, from the ``step`` events' times), waits between epochs and pauses included, so that
  ``step_time_s`` (its inverse), the ETA, the Runs view's SPEED and the doctor's "its pace" are one figure;
  a stalled run's pace runs to now, and falls as it waits. Before a second step is recorded: the median ``dt``
  (a run of 32 steps in 0.9 s once read its median step: 0.016 s where the script's own clock gave 0.029 s);
- ``step`` events' ``dt`` (seconds per optimizer step): the last ``WINDOW`` of the lowest rank that steps,
  a fixed-size window (never the history), whose median is ``median_step_s`` (a typical step, the long
  waits left out: the stall rule's unit);
- the total: a ``plan`` event (``telemetry.plan(steps=)``, what the program itself declares, as gpumon's
  trainers do) wins over a ``total`` event (a framework's guess: a tqdm bar's ``total``, HF ``max_steps``,
  Lightning's estimated stepping batches; among those the best source, as for the loss: hf > lightning >
  tqdm, and its latest total). Both count optimizer steps;
- ``progress`` = step / total (0..1), ``eta_s`` = the steps left x ``step_time_s``, None once the run ended.

Measured here (issue 33; tests/data/scripts/epoch_workers.py: two mp.spawn ranks whose DataLoader worker starts
again by spawn at each of 8 epochs): the script timed 1.56 steps/s, the pace 1.61, the median step 9.8 it/s;
SPEED showed 15.4 it/s on the same script when it was the median step.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from gpumon.core.format import duration
from gpumon.core.runs.reading.series import Pace
from gpumon.core.runs.reading.sources import rank_of

WINDOW = 64  # the latest dt values per rank the median is taken over


@dataclass
class Progress:
    dts: dict[int, deque[float]] = field(default_factory=dict)  # rank -> its latest seconds per step
    steps: dict[int, int] = field(default_factory=dict)  # rank -> its latest recorded optimizer step
    plan: dict[int, int] = field(default_factory=dict)  # rank -> its plan (``plan`` events)
    guesses: dict[str, int] = field(default_factory=dict)  # source -> its latest ``total`` event's total
    phases: dict[int, tuple[str, int | None]] = field(default_factory=dict)  # rank -> (phase, its step then)
    stamps: dict[int, float] = field(default_factory=dict)  # rank -> its latest step's time (not saved)
    paces: dict[int, Pace] = field(default_factory=dict)  # rank -> its steps per second by the wall clock

    def fold(self, kind: str, event: dict[str, Any], rank: int) -> None:
        """One event, any type (only ``step``, ``plan``, ``total`` and ``phase`` matter here)."""
        if kind == "step":
            step, dt = event.get("step"), event.get("dt")
            if type(step) is int:
                self.steps[rank] = step
            if isinstance(event.get("t"), int | float):
                self.stamps[rank] = float(event["t"])
                if type(step) is int:
                    self.paces.setdefault(rank, Pace()).add(float(event["t"]), step)
            if isinstance(dt, int | float) and not isinstance(dt, bool) and dt > 0:
                self.dts.setdefault(rank, deque(maxlen=WINDOW)).append(float(dt))
        elif kind == "plan" and type(event.get("steps")) is int and event["steps"] > 0:
            self.plan[rank] = event["steps"]
        elif kind == "phase":  # eval/save/train (telemetry/phases.py): the stall rule reads it, not saved
            self.phases[rank] = (str(event.get("phase")), self.steps.get(rank))
        elif kind == "total" and type(event.get("total_steps")) is int and event["total_steps"] > 0:
            self.guesses[str(event.get("source") or "framework")] = event["total_steps"]

    @property
    def total(self) -> tuple[int | None, str | None]:
        """(total steps, where it came from: "plan", or the framework's name); (None, None) when unknown."""
        if self.plan:
            return self.plan[min(self.plan)], "plan"
        if self.guesses:
            source = min(self.guesses, key=rank_of)  # HF's max_steps over a tqdm bar's guess
            return self.guesses[source], source
        return None, None

    def pace(self, now: float | None = None) -> float | None:
        """The run's steps per second (its lowest rank's, by the wall clock); ``now``: up to then, not to the
        latest step (a stalled run). None before a rank's second recorded step."""
        known = [rank for rank, pace in self.paces.items() if pace.rate is not None]
        return self.paces[min(known)].rate_at(now) if known else None

    def step_time(self, now: float | None = None) -> float | None:
        """Seconds per step: the inverse of the pace, else (its first second) the median step."""
        pace = self.pace(now)
        return 1.0 / pace if pace else self.median_step_s

    @property
    def step_time_s(self) -> float | None:
        return self.step_time()

    @property
    def median_step_s(self) -> float | None:
        ranks = [r for r, d in self.dts.items() if d]
        return median(self.dts[min(ranks)]) if ranks else None

    @property
    def step(self) -> int | None:
        return self.steps[min(self.steps)] if self.steps else None

    def fields(self, ended: bool, step: int | None = None, now: float | None = None) -> dict[str, Any]:
        """What a run's summary and row carry: ``total_steps``, ``total_source``, ``progress``, ``eta_s``,
        ``step_time_s``, ``median_step_s`` (None where unknown; no ETA once the run ended). ``step``: the run's
        step where no ``step`` event came (a program that only calls ``telemetry.log``); ``now``: a stalled
        run's time, its pace measured up to it."""
        total, source = self.total
        step, per_step = self.step if self.step is not None else step, self.step_time(now)
        progress = min(1.0, max(0.0, step / total)) if total and step is not None else None
        eta = None
        if not ended and total and per_step is not None:
            eta = max(0, total - (step or 0)) * per_step
        return {
            "total_steps": total,
            "total_source": source,
            "progress": progress,
            "eta_s": eta,
            "step_time_s": per_step,
            "median_step_s": self.median_step_s,
        }

    def to_state(self) -> dict[str, Any]:
        return {
            "dts": {str(r): list(d) for r, d in self.dts.items()},
            "steps": {str(r): s for r, s in self.steps.items()},
            "plan": {str(r): s for r, s in self.plan.items()},
            "guesses": dict(self.guesses),
            "paces": {str(r): p.to_state() for r, p in self.paces.items() if p.last is not None},
        }

    @classmethod
    def from_state(cls, state: Any) -> Progress:
        """A summary's progress; an older summary without one, or one we cannot read: start empty."""
        if not isinstance(state, dict):
            return cls()
        try:
            return cls(
                dts={int(r): deque(map(float, d), maxlen=WINDOW) for r, d in state["dts"].items()},
                steps={int(r): int(s) for r, s in state["steps"].items()},
                plan={int(r): int(s) for r, s in state["plan"].items()},
                guesses={str(k): int(v) for k, v in (state.get("guesses") or {}).items()},
                paces={int(r): Pace.from_state(p) for r, p in (state.get("paces") or {}).items()},
            )
        except (KeyError, TypeError, ValueError, IndexError):
            return cls()


ROW_FIELDS = ("total_steps", "progress", "eta_s", "step_time_s", "median_step_s")  # ``gpumon runs --json``


def rate_text(step_time_s: float | None) -> str:
    """ "12.3 it/s", or "4.2 s/it" when a step takes more than a second; "" when unknown."""
    if not step_time_s:
        return ""
    if step_time_s >= 1.0:
        return f"{step_time_s:.1f} s/it" if step_time_s < 100 else f"{step_time_s:.0f} s/it"
    rate = 1.0 / step_time_s
    if rate >= 999.5:  # what would print as "1000 it/s" reads as the 1k beside it
        return f"{rate / 1000:.0f}k it/s"
    return f"{rate:.1f} it/s" if rate < 99.95 else f"{rate:.0f} it/s"


def eta_text(seconds: float | None) -> str:
    """ "4m12s", "2h05m", "3d04h", "45s"; "" when unknown."""
    return "" if seconds is None else duration(math.ceil(seconds))


def progress_text(progress: float | None, eta_s: float | None) -> str:
    """ "37% 4m12s", "100%", "" when unknown."""
    if progress is None:
        return ""
    pct = f"{int(progress * 100)}%"
    eta = eta_text(eta_s)
    return f"{pct} {eta}" if eta else pct
