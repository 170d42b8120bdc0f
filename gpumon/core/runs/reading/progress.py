"""How far a run is and when it ends: its total, its position, the time per step, progress and ETA.

Folded from the run's events alongside the rest of its telemetry (``RunTelemetry.progress``):

- the pace: the lowest rank's steps per second by the wall clock over about its last two minutes
  (``series.Pace``, from the ``step`` events' times), waits between epochs and pauses included, so that
  ``step_time_s`` (its inverse), the ETA, the Runs view's SPEED and the doctor's "its pace" are one figure.
  A live run's pace is taken at the time it is shown (``now``): with no step for T seconds it is at most one
  step in T (its last step is its latest ``step`` event, or its events file's last write where that is later:
  the supervisor folds every 2 s, and a step there may not be folded yet). So it falls as soon as the steps
  stop, not when the stall rule fires. Before a second step is recorded: the median ``dt`` (a run of 32 steps
  in 0.9 s once read its median step: 0.016 s where the script's own clock gave 0.029 s);
- ``step`` events' ``dt`` (seconds per optimizer step): the last ``WINDOW`` of the lowest rank that steps,
  a fixed-size window (never the history), whose median is ``median_step_s`` (a typical step, the long
  waits left out: the stall rule's unit);
- the quiet: a live run's seconds since its last step (``quiet_s``); past ``quiet_after`` (the larger of
  10 x the median step and 5 s) the row says "no step for 1m28s", before the stall rule (120 s) fires;
- the total and the position, each in one unit, never mixed. Which wins, first to last:

  1. a ``plan`` (``telemetry.plan(steps=, done=)``, what the program declares, as gpumon's trainers do): this
     process's optimizer steps against them, plus ``done``, the job's steps before it (a resumed run);
  2. a framework's ``total`` event, the best source as for the loss (hf > lightning > tqdm): its ``done``
     against its ``total_steps``, both in its own unit (HF's and Lightning's ``global_step``, the whole job's,
     a resumed one's included; a tqdm bar's position, its ``initial`` included, in micro-batches, samples or
     steps). A tqdm bar that counts one epoch (a bar over a DataLoader, or one that starts again while the run
     steps) does not know the run's total: progress is then unknown, and says why (``progress_why``);

  ``progress`` = position / total (0..1); ``eta_s`` = what is left / the rate in the same unit: gpumon's pace
  where the position moves one for one with the optimizer steps (a plan; a framework's count that does),
  else the framework's own count by the wall clock; None once the run ended;
- the job's step (``job_step``, the STEP column): the program's ``telemetry.log(step=)``, else the plan's
  ``done`` plus this process's steps, else a framework's count that moves with the optimizer steps (what the
  user's bar and logs show after a resume), else the optimizer steps this process took.

Measured here (issue 33; tests/data/scripts/epoch_workers.py: two mp.spawn ranks whose DataLoader worker starts
again by spawn at each of 8 epochs): the script timed 1.56 steps/s, the pace 1.61, the median step 9.8 it/s;
SPEED showed 15.4 it/s on the same script when it was the median step.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from gpumon.core.format import duration
from gpumon.core.runs.reading.position import Position
from gpumon.core.runs.reading.series import Pace
from gpumon.core.runs.reading.sources import rank_of

WINDOW = 64  # the latest dt values per rank the median is taken over
QUIET_STEPS = 10.0  # "no step for ..." once the quiet passes this many median steps
QUIET_MIN_S = 5.0  # and at least this long
Written = Callable[[int], float | None]  # rank -> its events file's last write (quiet.py)


def _source(key: str) -> str:
    return key.rsplit(":", 1)[0]


def _order(key: str) -> tuple[int, int]:
    """A position's precedence: its source's (hf > lightning > tqdm), then its rank's (lowest first)."""
    source, _, rank = key.rpartition(":")
    return rank_of(source), int(rank) if rank.isdigit() else 0


def quiet_after(median_step_s: float | None) -> float:
    """How long without a step is clearly longer than the run's usual step."""
    return max(QUIET_STEPS * (median_step_s or 0.0), QUIET_MIN_S)


@dataclass
class Progress:
    dts: dict[int, deque[float]] = field(default_factory=dict)  # rank -> its latest seconds per step
    steps: dict[int, int] = field(default_factory=dict)  # rank -> its latest recorded optimizer step
    plan: dict[int, int] = field(default_factory=dict)  # rank -> its plan (``plan`` events)
    plan_done: dict[int, int] = field(default_factory=dict)  # rank -> the job's steps before its plan began
    # "source:rank" -> that rank's count from that source (``total`` events): every DDP rank may draw its own bar
    positions: dict[str, Position] = field(default_factory=dict)
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
            done = event.get("done")
            self.plan_done[rank] = done if type(done) is int and done > 0 else 0
        elif kind == "phase":  # eval/save/train (telemetry/phases.py): the stall rule reads it, not saved
            self.phases[rank] = (str(event.get("phase")), self.steps.get(rank))
        elif (
            kind == "note"
            and str(event.get("text", "")).startswith("gpumon's ")
            and " hook is off" in str(event.get("text", ""))
        ):  # a framework's hook failed and went off: its count stops where it was, not where the run is
            source = str(event["text"]).split()[1]
            for key, position in self.positions.items():
                if _source(key) == source and not position.why:
                    position.why = f"gpumon's {source} hook went off: its count stopped being read"
        elif kind == "total":
            source = str(event.get("source") or "framework")
            position = self.positions.setdefault(f"{source}:{rank}", Position())
            position.add(event, rank, self.steps.get(rank, 0), again_is_epoch=source == "tqdm", steps=source == "hf")

    def _position(self) -> tuple[str, Position] | None:
        """The framework count that wins (hf > lightning > tqdm, its lowest rank), where it knows a total."""
        known = [key for key, position in self.positions.items() if position.total]
        if not known:
            return None
        key = min(known, key=_order)
        return _source(key), self.positions[key]

    @property
    def total(self) -> tuple[int | None, str | None]:
        """(total, where it came from: "plan", or the framework's name); (None, None) when unknown. A framework's
        total is in its own unit (``position``)."""
        if self.plan:
            rank = min(self.plan)
            return self.plan_done.get(rank, 0) + self.plan[rank], "plan"
        found = self._position()
        if found is None or found[1].why:
            return None, None
        return found[1].total, found[0]

    @property
    def why(self) -> str:
        """Why the run's total is unknown though a framework counts ("" otherwise)."""
        found = None if self.plan else self._position()
        return found[1].why if found is not None else ""

    def position(self, step: int | None = None) -> int | None:
        """How far the run is, in its total's unit; ``step``: the run's where no ``step`` event came."""
        if self.plan:
            rank = min(self.plan)
            own = self.steps.get(rank, step)
            return None if own is None else self.plan_done.get(rank, 0) + own
        found = self._position()
        if found is None or found[1].why:
            return None
        return found[1].now(self.steps.get(found[1].rank))

    def job_step(self) -> int | None:
        """The job's own step where it differs from this process's count (a plan's ``done``, a framework's
        count that moves with the optimizer steps); None: the optimizer steps counted here are it."""
        if self.plan:
            rank = min(self.plan)
            own, done = self.steps.get(rank), self.plan_done.get(rank, 0)
            return own + done if own is not None and done else None
        for key in sorted(self.positions, key=_order):
            position = self.positions[key]
            if position.offset is not None and not position.why:
                return position.now(self.steps.get(position.rank))
        return None

    def pace_rank(self) -> int | None:
        known = [rank for rank, pace in self.paces.items() if pace.rate is not None]
        return min(known) if known else None

    def pace(self, now: float | None = None, written: Written | None = None) -> float | None:
        """The run's steps per second (its lowest rank's, by the wall clock); ``now``: taken then (a live run),
        so that a quiet falls; ``written``: each rank's events file's last write. None before a second step."""
        rank = self.pace_rank()
        if rank is None:
            return None
        since = written(rank) if written is not None and now is not None else None
        return self.paces[rank].rate_at(now, since)

    def quiet(self, now: float | None, written: Written | None = None) -> float | None:
        """Seconds since the run's last step as known at ``now`` (None without a step or a time)."""
        rank = self.pace_rank() if self.paces else None
        rank = rank if rank is not None else (min(self.paces) if self.paces else None)
        if now is None or rank is None or self.paces[rank].last is None:
            return None
        last = self.paces[rank].last
        assert last is not None
        since = written(rank) if written is not None else None
        return max(0.0, now - max(last[0], since if since is not None else last[0]))

    def last_step_t(self) -> float | None:
        rank = self.pace_rank()
        rank = rank if rank is not None else (min(self.paces) if self.paces else None)
        last = self.paces[rank].last if rank is not None else None
        return last[0] if last is not None else None

    def step_time(self, now: float | None = None, written: Written | None = None) -> float | None:
        """Seconds per step: the inverse of the pace, else (its first second) the median step."""
        pace = self.pace(now, written)
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

    def _eta(self, left: int, per_step: float | None, now: float | None, written: Written | None) -> float | None:
        """Seconds for ``left`` of the total's unit: at gpumon's pace where the position moves with the optimizer
        steps, else at the framework's own rate by the wall clock."""
        found = None if self.plan else self._position()
        if found is None or found[1].offset is not None:
            return left * per_step if per_step is not None else None
        position = found[1]
        since = written(position.rank) if written is not None and now is not None else None
        rate = position.pace.rate_at(now, since)
        return left / rate if rate else None

    def fields(
        self, ended: bool, step: int | None = None, now: float | None = None, written: Written | None = None
    ) -> dict[str, Any]:
        """What a run's summary and row carry: ``total_steps``, ``total_source``, ``position`` (how far, in the
        total's unit), ``progress``, ``eta_s``,
        ``step_time_s``, ``median_step_s``, ``quiet_s``, ``last_step_t``, ``progress_why`` (None where unknown;
        no ETA and no quiet once the run ended). ``step``: the run's step where no ``step`` event came (a program
        that only calls ``telemetry.log``); ``now``: a live run's time, its pace measured up to it; ``written``:
        each rank's events file's last write (quiet.py)."""
        now = None if ended else now
        total, source = self.total
        where = self.position(step)
        per_step = self.step_time(now, written)
        progress = min(1.0, max(0.0, where / total)) if total and where is not None else None
        eta = None
        if not ended and total and where is not None:
            eta = self._eta(max(0, total - where), per_step, now, written)
        return {
            "total_steps": total,
            "total_source": source,
            "position": where if total else None,
            "progress": progress,
            "eta_s": eta,
            "step_time_s": per_step,
            "median_step_s": self.median_step_s,
            "quiet_s": self.quiet(now, written),
            "last_step_t": self.last_step_t(),
            "progress_why": self.why or None,
        }

    def to_state(self) -> dict[str, Any]:
        return {
            "dts": {str(r): list(d) for r, d in self.dts.items()},
            "steps": {str(r): s for r, s in self.steps.items()},
            "plan": {str(r): s for r, s in self.plan.items()},
            "plan_done": {str(r): s for r, s in self.plan_done.items()},
            "positions": {k: p.to_state() for k, p in self.positions.items()},
            "paces": {str(r): p.to_state() for r, p in self.paces.items() if p.last is not None},
        }

    @classmethod
    def from_state(cls, state: Any) -> Progress:
        """A summary's progress; an older summary without one, or one we cannot read: start empty."""
        if not isinstance(state, dict):
            return cls()
        try:
            positions = {str(k): Position.from_state(v) for k, v in (state.get("positions") or {}).items()}
            for source, total in (state.get("guesses") or {}).items():  # a summary from before positions
                positions.setdefault(f"{source}:0", Position(total=int(total)))
            return cls(
                dts={int(r): deque(map(float, d), maxlen=WINDOW) for r, d in state["dts"].items()},
                steps={int(r): int(s) for r, s in state["steps"].items()},
                plan={int(r): int(s) for r, s in state["plan"].items()},
                plan_done={int(r): int(s) for r, s in (state.get("plan_done") or {}).items()},
                positions=positions,
                paces={int(r): Pace.from_state(p) for r, p in (state.get("paces") or {}).items()},
            )
        except (KeyError, TypeError, ValueError, IndexError):
            return cls()


ROW_FIELDS = (
    "total_steps",
    "position",
    "progress",
    "eta_s",
    "step_time_s",
    "median_step_s",
    "quiet_s",
    "last_step_t",
    "progress_why",
)  # ``gpumon runs --json``


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


def quiet_text(quiet_s: float | None, median_step_s: float | None) -> str:
    """ "no step for 1m28s" once a live run's quiet is clearly longer than its usual step; "" before."""
    if quiet_s is None or quiet_s <= quiet_after(median_step_s):
        return ""
    return f"no step for {duration(math.floor(quiet_s))}"


def quiet_short(quiet_s: float | None, median_step_s: float | None) -> str:
    """The same in at most 11 characters, for a narrow cell: "no step 88s", "no step 14m", "no step 3h"."""
    if not quiet_text(quiet_s, median_step_s):
        return ""
    assert quiet_s is not None
    for unit, size in (("s", 1), ("m", 60), ("h", 3600), ("d", 86400)):
        if quiet_s / size < 100:
            return f"no step {int(quiet_s // size)}{unit}"
    return "no step 99d+"


def progress_text(progress: float | None, eta_s: float | None) -> str:
    """ "37% 4m12s", "100%", "" when unknown."""
    if progress is None:
        return ""
    pct = f"{int(progress * 100)}%"
    eta = eta_text(eta_s)
    return f"{pct} {eta}" if eta else pct
