"""When a rank takes its censuses: on request (``control/census``), at step boundaries, never waiting.

gpumon asks by writing ``control/census`` in the run directory (``request_census``). The step hook
looks at that file's mtime at most every ``CHECK_EVERY_S`` (one ``os.stat``), then takes a look at that
step and a second one ``gap`` steps later, each written as a ``census`` event (docs/events.md).

A pair of looks that straddles a release (a loss summed as a tensor and reset each epoch, a list of
outputs cleared) sees the kept graph younger or the collection smaller at its second look: nothing
grew between them, though memory climbs all through each cycle. The rank can tell (``released``):
then it looks again, half the gap later, at most ``MAX_LOOKS`` looks a request, and its last two looks
are the pair the doctor diffs. A release ends a cycle, so the next release is a cycle away: the gaps
20, 10, 5 leave a pair inside one cycle for any cycle of 15 steps or more. The cost is a few looks a
request, whatever the run's length, each at a step boundary: training never waits for the supervisor.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from gpumon.core.protocol import CENSUS_FLAG, CONTROL_DIR, DEFAULT_GAP, KEPT_STEPS, census_group
from gpumon.telemetry.census import MIN_HELD, take_census
from gpumon.telemetry.request_file import RequestFile

MAX_LOOKS = 4  # looks per request: the first pair and up to two more after a release


class CensusTrigger:
    """Owned by the step hook: ``at_step`` costs one comparison per step while idle."""

    def __init__(
        self, run_dir: str, torch: ModuleType, since_ns: int, heap: Callable[[], int | None] | None = None
    ) -> None:
        self.path = os.path.join(run_dir, CONTROL_DIR, CENSUS_FLAG)
        self.torch = torch
        self.heap = heap  # the live heap's bytes (glibc's mallinfo2), to say what a look leaves in it
        self.left = 0  # bytes the looks since the last step event left in the heap (``take_left``)
        self.requests = RequestFile(self.path, since_ns)  # requests older than this process are not ours
        # The look due: (request, requested gap, its seq, the step it is due at, the look before it).
        self.due: tuple[int, int, int, int, Mapping[str, Any] | None] | None = None

    def at_step(self, step: int, now: float, write: Callable[..., None]) -> None:
        if self.due is not None:
            if step >= self.due[3]:
                self._look(write, step)
            return
        request = self.requests.new(now)
        if request is None:
            return
        self.due = (request, _read_gap(self.path), 1, step, None)
        self._look(write, step)

    def _look(self, write: Callable[..., None], step: int) -> None:
        assert self.due is not None
        request, gap, seq, _, before = self.due
        self.due = None
        fields: dict[str, Any] = {"request": request, "seq": seq, "step": step, "gap": gap}
        start = self.heap() if self.heap is not None else None
        try:
            found = take_census(self.torch)
        except Exception as err:  # noqa: BLE001 - a census must never break training
            write("census", **fields, error=f"{type(err).__name__}: {err}")
            return
        spacing = gap
        if before is not None:
            fields["released"] = released(before, found, step - int(before["step"]))
            spacing = max(1, (step - int(before["step"])) // 2)
        if seq == 1 or (fields["released"] and seq < MAX_LOOKS):
            fields["again"] = spacing  # another look comes, this many steps on
            self.due = (request, gap, seq + 1, step + spacing, {"step": step, **_summary(found)})
        write("census", **fields, **found)
        end = self.heap() if start is not None and self.heap is not None else None
        if start is not None and end is not None:
            # Freed blocks glibc keeps in its caches count as live: a look and its event leave 1-15 KiB, the
            # summary kept for the next look more. No training ran between the two reads: it is all the census's.
            self.left += end - start

    def take_left(self) -> int:
        """What the looks since the last call left in the heap: the next step event's ``census_left``."""
        left, self.left = self.left, 0
        return left


def _summary(found: Mapping[str, Any]) -> dict[str, Any]:
    """What ``released`` needs of a look, kept until the next one."""
    keys = ("shape", "dtype", "device", "grad_fn", "requires_grad", "count", "age")
    groups = [{k: g.get(k) for k in keys} for g in found.get("groups") or ()]
    return {"autograd_seq": found.get("autograd_seq"), "groups_total": found.get("groups_total"), "groups": groups}


def released(first: Mapping[str, Any], second: Mapping[str, Any], steps: int) -> bool:
    """Whether something kept at ``first`` was let go by ``second`` (``steps`` later): a pair that straddles
    the end of a cycle, across which nothing is seen to grow.

    A kept graph's oldest node stays while it is kept, so its age grows by every node made since; one
    that aged by less than half of them was freed (another, younger, took its place or none did). A
    numerous group that lost half of its tensors, or vanished, was a collection cleared.
    """
    made = int(second.get("autograd_seq") or 0) - int(first.get("autograd_seq") or 0)
    kept_age = KEPT_STEPS * made / steps if made > 0 and steps > 0 else None
    after = {census_group(g): g for g in second.get("groups") or ()}
    complete = int(second.get("groups_total") or 0) <= len(after)  # a group missing is gone, not left out
    for old in first.get("groups") or ():
        new = after.get(census_group(old))
        if new is None and not complete:
            continue
        count, age = int((new or {}).get("count") or 0), int((new or {}).get("age") or 0)
        if kept_age is not None and int(old.get("age") or 0) >= kept_age and age - int(old.get("age") or 0) < made / 2:
            return True
        if int(old.get("count") or 0) >= MIN_HELD and count <= int(old.get("count") or 0) // 2:
            return True
    return False


def _read_gap(path: str) -> int:
    try:
        with open(path) as fh:
            return min(10_000, max(1, int(fh.read(32).strip() or DEFAULT_GAP)))
    except (OSError, ValueError):
        return DEFAULT_GAP
