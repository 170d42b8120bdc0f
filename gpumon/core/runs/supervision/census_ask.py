"""When the supervisor asks its run's ranks for a tensor census, and how far apart the two looks are.

Once memory grows, a request whose looks are ``DEFAULT_GAP`` (20) steps apart. A leak that grows only now and
then (an evaluation every 50 steps, without torch.no_grad(), keeping its outputs: a staircase) grows nothing
between two looks that fall between two evaluations, and the census names nothing. So when the last request
came back naming nothing on every rank that answered while memory still grows, the supervisor asks again,
each gap ``WIDER`` times the last: 20, 80, 320, 1,280 steps. Two looks at least one period apart always hold
a stair between them, for any period up to 1,280 steps. At most ``TRIES`` requests a run, each a few looks
at step boundaries: the training never waits for them.

A census that named nothing on a rank whose memory warns (it fills before the run ends) also starts, once a run,
a window in that rank (``request_pymem``, telemetry/pymem.py): tracemalloc, and on CUDA PyTorch's memory history.
What grows may be the script's Python objects (a cache that never evicts): the window names the line that
allocates them and the dict or list that keeps them. The leak alert waits for it as for a census.

One at a time: while the window is out, the staircase's next census waits for it, so a census look never
runs inside the window (traced, a look costs up to ~40% more: bench/census_in_window.py) and the two costs never
land on the same steps. A window that named the line ends the staircase (a wider census could only add its own
looks' cost); one that named nothing lets it go on. The window is not held back until the staircase's widest
request (1,280 steps): the leak alert, which waits at most 30 s for them (leak_alert.py), then went out without
the line (measured on tests/test_doctor_python_growth.py's run at 15 ms a step).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpumon.core.doctor.causes import name_causes
from gpumon.core.doctor.leak_state import LeakState
from gpumon.core.protocol import DEFAULT_GAP, request_census, request_pymem

WIDER = 4  # each gap this many times the last
TRIES = 4  # requests a run at most: gaps of 20, 80, 320 and 1,280 steps


class Notes(Protocol):
    def write(self, kind: str, /, **fields: Any) -> None: ...


@dataclass
class CensusAsk:
    asked: int = 0  # requests made
    request: int | None = None  # the latest one's id (its control file's mtime, in its looks' ``request``)
    done: bool = False  # a census named a cause, or failed: no more requests
    python: int | None = None  # the tracemalloc window's request id, once asked (once a run)
    python_ranks: frozenset[int] = frozenset()  # the ranks it asked

    def gap(self, states: Mapping[int, LeakState], census: list[dict[str, Any]]) -> int | None:
        """The gap of the request to make now; None while none is due."""
        growing = {rank for rank, state in states.items() if state.grows}
        if self.done or not growing or self.asked >= TRIES:
            return None
        if self.asked == 0:
            return DEFAULT_GAP
        mine = [e for e in census if e.get("request") == self.request]
        if any(e.get("error") for e in mine):
            self.done = True  # a census that fails once fails again
            return None
        answered = {_rank(e) for e in mine if int(e.get("seq") or 0) >= 2 and not e.get("again")}
        if not answered & growing:
            return None  # not back yet from a rank whose memory grows
        if any(found for rank, found in name_causes(census).items() if rank in answered):
            self.done = True  # named: the doctor has its answer
            return None
        return DEFAULT_GAP * WIDER**self.asked

    def python_ranks_due(self, states: Mapping[int, LeakState], census: list[dict[str, Any]]) -> set[int]:
        """The ranks to ask for a window now: their memory warns and their census named nothing (a CUDA rank's
        window records the allocator's history as well: GPU memory that no tensor the census saw holds)."""
        if self.python is not None or self.request is None:
            return set()
        named = name_causes(census)
        # Only memory that fills before the run ends: a window slows the rank's Python allocations
        # (bench/pymem_window.py), which a healthy run whose memory creeps (the Flight Recorder) should never pay.
        return {r for r, s in states.items() if s.warning and named.get(r) == []}

    def pending(self, census: list[dict[str, Any]]) -> bool:
        """A request made and not back from any rank yet (the leak alert waits for it)."""
        if self.python is not None and not _window_back(census, self.python):
            return True
        if self.request is None:
            return False
        mine = [e for e in census if e.get("request") == self.request]
        return not any(e.get("error") or (int(e.get("seq") or 0) >= 2 and not e.get("again")) for e in mine)

    def ask(self, run_dir: str | os.PathLike[str], states: Mapping[int, LeakState], census: list[dict[str, Any]],
            notes: Notes) -> None:  # fmt: skip
        """Make the request due now, if any, and say so in the run's events."""
        python = self.python_ranks_due(states, census)
        if python:
            with contextlib.suppress(OSError):
                self.python, self.python_ranks = request_pymem(run_dir, python), frozenset(python)
                ranks = ", ".join(str(r) for r in sorted(python))
                notes.write("note", text=f"the tensor census saw nothing grow while memory grows: asked rank "
                                         f"{ranks} for a tracemalloc window (the script's Python objects)")  # fmt: skip
        if self.python is not None and not _window_back(census, self.python):
            return  # the next census after the window: never a look inside it
        gap = self.gap(states, census)
        if gap is None:
            return
        self.asked += 1
        with contextlib.suppress(OSError):
            self.request = request_census(run_dir, gap)
            if self.asked == 1:
                notes.write("note", text="memory grows per step: asked the ranks for a tensor census")
            else:
                notes.write("note", text=f"the tensor census saw nothing grow while memory grows: asked again, "
                                         f"its looks {gap} steps apart (a leak that grows now and then)")  # fmt: skip


def _window_back(census: list[dict[str, Any]], window: int) -> bool:
    return any(e.get("type") == "pymem" and e.get("window") == window for e in census)


def _rank(event: Mapping[str, Any]) -> int:
    digits = str(event.get("src", ""))[4:]
    return int(digits) if digits.isdigit() else 0
