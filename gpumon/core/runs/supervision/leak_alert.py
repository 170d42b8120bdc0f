"""The leak alert of a run: sent once, with what the tensor census named (the variable, file:line, the fix).

The supervisor asks the ranks for a census when memory first grows; the alarm may come in the same
pass, before the census's two halves (``gap`` steps apart) are back. An alert sent then would say
only "memory grows", and the user would have to open the doctor to learn what to change. So the
alert waits for that rank's census, at most ``CENSUS_WAIT_S``, and not at all when memory would run
out before then at the rank's pace, when censuses are off, or when the census already came back.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpumon.core.doctor.causes import Cause, census_pairs, name_causes
from gpumon.core.doctor.leak_state import LeakState

CENSUS_WAIT_S = 30.0  # at most this long for the census that names the cause
PREFIX = "memory leak on rank "


@dataclass
class LeakAlert:
    census: bool = True  # the run's ranks take censuses (not --no-census)
    sent: bool = False
    waiting_since: float | None = None  # when the alarm came and the alert began to wait for the census

    def due(
        self,
        states: Mapping[int, LeakState],
        fold: Any,
        final: bool = False,
        asking: bool = False,
        now: float | None = None,
    ) -> tuple[str, dict[str, Any]] | None:
        """(text, fields) when the leak alert should go now; None while there is none or it waits. ``asking``: a
        census was asked for again (census_ask.py) and is not back."""
        leaking = {rank: s for rank, s in states.items() if s.alarm}
        if leaking and any(a.startswith(PREFIX) for a in fold.alerts):
            self.sent = True  # an earlier supervisor of the run sent it
        if self.sent or not leaking:
            return None  # (an alarm withdrawn while waiting, a sawtooth seen, is not sent)
        rank, state = max(leaking.items(), key=lambda item: item[1].slope)
        found = name_causes(fold.census).get(rank) or []
        now = time.monotonic() if now is None else now
        if not found and not final and self._wait(rank, state, fold, now, asking):
            return None
        self.sent = True
        return alert_text(rank, state, found[0] if found else None)

    def _wait(self, rank: int, state: LeakState, fold: Any, now: float, asking: bool) -> bool:
        if not self.census or (rank in census_pairs(fold.census) and not asking) or _census_failed(fold.census, rank):
            return False  # no census coming, or it came back and named nothing
        if self.waiting_since is None:
            self.waiting_since = now
        pace = fold.paces.get(rank)
        rate = pace.rate if pace is not None else None
        step = state.step or 0
        if rate and state.runs_out_at is not None and (state.runs_out_at - step) / rate < 2 * CENSUS_WAIT_S:
            return False  # it runs out soon: say so now
        return now - self.waiting_since < CENSUS_WAIT_S


def _census_failed(census: list[dict[str, Any]], rank: int) -> bool:
    src = f"rank{rank}"
    return any(e.get("error") and e.get("type") == "census" and str(e.get("src", "")) == src for e in census)


def alert_text(rank: int, state: LeakState, cause: Cause | None) -> tuple[str, dict[str, Any]]:
    """ "memory leak on rank 0: `running_loss` in train.py:90 (train) keeps every step's autograd graph (...):
    +1.2 MiB/iter ..., runs out at iteration ~20,725 ...", with the census's fix as the ``fix`` field."""
    where = {"gpu": " (GPU memory)", "host": " (host memory)"}.get(state.memory, "")
    named = f"{cause.title}: " if cause is not None else ""
    fields: dict[str, Any] = {"rank": rank}
    if cause is not None:
        fields.update(cause=cause.holder or cause.title, fix=cause.advice)
    return f"{PREFIX}{rank}{where}: {named}{state.describe(label=False)}", fields
