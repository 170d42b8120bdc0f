"""Where a framework says the job is: a ``total`` event's ``done`` against its ``total_steps``, in the framework's
own unit (a tqdm bar's micro-batches or samples, HF's and Lightning's ``global_step``), never mixed with gpumon's
optimizer steps.

A position keeps its latest count, its own rate by the wall clock (``series.Pace`` over (time, done)), and whether
its count moves one for one with the optimizer steps the bootstrap counts (``offset``: the job's step is then
gpumon's step plus it, as after a resume from a checkpoint, ``tqdm(initial=5000)``, HF's ``global_step``). A tqdm
bar over one epoch's batches (``per_epoch`` in its event), or one that starts again while the run steps (a bar per
epoch, made again or reset), counts a part of the run: its total is not the run's (``why``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumon.core.runs.reading.series import Pace

PER_EPOCH = "a tqdm bar over one epoch's batches: how many epochs follow is unknown"
AGAIN = "the tqdm bar starts again while the run steps (a bar per epoch): how many follow is unknown"


@dataclass
class Position:
    total: int | None = None  # the framework's total, in its own unit
    done: int | None = None  # how far it is, in that unit (a resumed job's count starts at its checkpoint's)
    step: int = 0  # the reporting rank's latest recorded optimizer step when ``done`` was read
    rank: int = 0
    anchor: tuple[int, int] | None = None  # (done, step) when this count began: the test of its unit
    offset: int | None = None  # the job's step less the rank's, while done moves one for one with the steps
    pace: Pace = field(default_factory=Pace)  # (time, done): its own rate by the wall clock
    why: str = ""  # why its total is not the run's; "" when it is

    def add(self, event: dict[str, Any], rank: int, step: int, again_is_epoch: bool, steps: bool = False) -> None:
        """One ``total`` event of this source; ``step``: the rank's latest recorded step, where the event does not
        carry the exact count (``step``, written since issue 48); ``steps``: the source counts optimizer steps
        (HF's ``global_step``: one optimizer), so one exact event tells the offset."""
        total, done = event.get("total_steps"), event.get("done")
        exact = type(event.get("step")) is int
        if exact:
            step = event["step"]
        if type(total) is int and total > 0:
            self.total = total
        if event.get("per_epoch") is True:
            self.why = PER_EPOCH
        if type(done) is not int or done < 0:
            return
        if self.done is not None and done < self.done:  # a new bar, a reset, a new fit()
            if again_is_epoch and self.anchor is not None and step > self.anchor[1]:
                self.why = AGAIN  # it ran over training steps and starts again: one part of many
            self.anchor, self.offset = None, None
        if self.anchor is None or step < self.anchor[1]:
            self.anchor = (done, step)
            self.offset = done - step if steps and exact else None
        elif done - self.anchor[0] >= 2:
            # One for one: micro-batches (2 or more a step) or samples never pass. Without the event's own count,
            # give or take the rank's last step not recorded yet (at most 200 a second are, the rest at exit).
            slack = 0 if exact else 1
            moved = abs((done - self.anchor[0]) - (step - self.anchor[1])) <= slack
            self.offset = self.anchor[0] - self.anchor[1] if moved else None
        self.done, self.step, self.rank = done, step, rank
        if isinstance(event.get("t"), int | float):
            self.pace.add(float(event["t"]), done)

    def now(self, step: int | None) -> int | None:
        """Its count now: the latest ``done``, or where it moves with the optimizer steps, the rank's step plus
        the offset (its last ``done`` is up to a second old)."""
        if self.done is None:
            return None
        if self.offset is not None and step is not None:
            moved = max(self.done, step + self.offset)
            return min(moved, self.total) if self.total else moved
        return self.done

    def to_state(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "done": self.done,
            "step": self.step,
            "rank": self.rank,
            "anchor": list(self.anchor) if self.anchor else None,
            "offset": self.offset,
            "pace": self.pace.to_state(),
            "why": self.why,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Position:
        anchor = state.get("anchor")
        return cls(
            total=state.get("total"),
            done=state.get("done"),
            step=int(state.get("step") or 0),
            rank=int(state.get("rank") or 0),
            anchor=(int(anchor[0]), int(anchor[1])) if anchor else None,
            offset=state.get("offset"),
            pace=Pace.from_state(state["pace"]) if state.get("pace") else Pace(),
            why=str(state.get("why") or ""),
        )
