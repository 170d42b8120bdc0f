"""What a census leaves in a healthy rank's heap after its look: a slow creep for some tens of steps (Python's and
glibc's caches refilled after the walk), beyond the residue the rank measures at once (``census_left``). Seen in
CI at 574f257: a healthy twin censused at step 95 and 116 grew 4 KiB by step 175, flat before and after, and read
"growing" at 134 (tests/test_doctor_leak.py). For a rank whose memory read "ok" when the census came, the heap's
change over ``SETTLE_STEPS`` after each look is set aside too; a rank that was already growing (the supervisor
asks a census because memory grows) keeps every byte: its verdict never waits on this.
"""

from __future__ import annotations

SETTLE_STEPS = 80  # steps after a look whose heap change is the census's, on a rank that read "ok"


class Settling:
    """Per rank: until which step, and the heap value last seen there."""

    def __init__(self) -> None:
        self._until: dict[int, tuple[int, float | None]] = {}

    def looked(self, rank: int, step: int) -> None:
        """A census looked at ``step`` on a rank whose memory read "ok"."""
        last = self._until.get(rank, (0, None))[1]
        self._until[rank] = (step + SETTLE_STEPS, last)

    def aside(self, rank: int, step: int, heap: float) -> float:
        """The bytes of this sample's change to set aside (0 outside a window)."""
        found = self._until.get(rank)
        if found is None:
            return 0.0
        until, last = found
        if step > until:
            del self._until[rank]
            return 0.0
        self._until[rank] = (until, heap)
        return heap - last if last is not None else 0.0
