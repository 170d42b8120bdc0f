"""Whether memory that grows is worth an alarm: only when it fills memory before the run is expected to end.

The detector (leak.py) says that memory grows per iteration and projects the iteration at which it fills
the device (CUDA ranks: the ``device`` event's size) or the host (physical memory). This compares that
with the run's expected end, per rank:

- the rank's ``plan`` event (``telemetry.plan(steps=...)``; gpumon's trainers send epochs x batches,
  within --max-steps), or past it the step the rank has reached;
- else the step the rank reaches in ``HORIZON_S`` (24 hours) at the run's pace (progress.py: steps a second by
  the wall clock over about the last two minutes, the figure the Runs view's SPEED and the ETA show);
- else (no pace yet) no end is known, and any projected run-out counts.

Filling memory by then keeps the detector's ``growing``/``leak`` (the row's warning, the alert);
later, the state is ``growth``: reported, no alarm. So is a sawtooth (memory released at each cycle's end)
whose peaks never reach memory's size. With no memory size to project against (a CUDA
rank whose ``device`` event failed) nothing can be ruled out, and the detector's verdict stands.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpumon.core.doctor.leak_state import TRENDS, LeakState

if TYPE_CHECKING:
    from gpumon.core.runs.reading.telemetry import RunTelemetry

HORIZON_S = 24 * 3600


@dataclass(frozen=True)
class End:
    step: int
    basis: str  # "its plan of 520 steps", "24 h at its pace of 31 steps/s"
    ended: int | None = None  # the step an ended run reached: the horizon is then what it would have been


def _rate(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"


def expected_end(telemetry: RunTelemetry, rank: int, ended: bool = False) -> End | None:
    """The step ``rank`` is expected to reach: its plan, else 24 h at its pace; None when neither is known.
    ``ended``: the run has ended, at the rank's latest step; the growth is still judged against the same
    horizon (a stopped run's leak is no less one), and the words say where it ended."""
    step = telemetry.rank_step(rank) or 0
    at = step if ended else None
    plan = telemetry.plans.get(rank)
    if plan:
        return End(max(plan, step), f"its plan of {plan:,} steps", at)
    rate = telemetry.progress.pace()  # the run's: its ranks step together, and the row shows this one
    if rate:
        return End(step + int(rate * HORIZON_S), f"24 h at its pace of {_rate(rate)} steps/s", at)
    return None


def judge(state: LeakState, end: End | None) -> LeakState:
    """``state`` with the run's end: a trend that fills memory only after it becomes ``growth``."""
    if end is not None:
        state = replace(state, ends_at=end.step, ends_by=end.basis, ended_at=end.ended)
    trend = state.trend or (state.state if state.state in TRENDS else "")
    if not trend:
        return state
    if state.slope <= 0:  # the detector's verdict outlives the rise by a cool-down; memory no longer grows
        return replace(state, state="ok", trend=trend)
    out = state.runs_out_at
    if out is None and state.cycle and state.capacity is not None:  # released each cycle, peaks below memory
        return replace(state, state="growth", trend=trend)
    threatens = out is None or end is None or out <= end.step
    return replace(state, state=trend if threatens else "growth", trend=trend)
