"""Time inside collectives, per rank, with no code: what tells the slow rank from the ranks that wait for it.

In lock-step data parallelism every rank's step takes as long as the slowest's, so the step time cannot name a
straggler. What differs is where the time goes: the slow rank spends longer in its own work, the others wait in
the collectives for it. Two clocks, both read around calls the script already makes:

- ``backward()``: DDP's reducer all-reduces the gradients inside it and waits for the last bucket at its end, so a
  rank that waits for a peer waits there (the doctor compares ranks: compute is alike, the surplus is waiting);
- the blocking collectives of ``torch.distributed`` the script calls (``dist.all_reduce(t)``, ``barrier()``...),
  timed whole. ``async_op=True`` calls return at once: their wait is not seen.

Each collective called also leaves its description (op, its number in its group, bytes, group, the caller's
file:line) as the rank's last one started and finished: what a hang verdict reads. Two ``perf_counter`` reads and
a frame's file and line a call: a few µs (bench/collective_clock.py, docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

from gpumon import telemetry
from gpumon.core.collective_ledger import P2P
from gpumon.telemetry.coll_ledger import Ledger

# torch.distributed's blocking collectives a script calls by name (the module's own attributes are wrapped, not
# distributed_c10d's: torch's helpers that call one another inside it are counted once, at the outer call).
TIMED = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "reduce", "gather", "gather_object",
    "scatter", "scatter_object_list", "all_to_all", "all_to_all_single", "send", "recv", "monitored_barrier",
)  # fmt: skip


class Clock:
    """Seconds in backward() and in collectives since the last step event, and the last collective's record."""

    def __init__(self) -> None:
        self.backward_s = 0.0
        self.collective_s = 0.0
        self.seq: dict[str, int] = {}  # group name -> collectives this process called in it
        self.started: dict[str, Any] | None = None  # the last collective entered
        self.finished: dict[str, Any] | None = None  # the last one that returned
        self.ledger: Ledger | None = None  # the same two, where the supervisor reads them (coll_ledger.py)
        self.cpu = time.process_time()  # this process's CPU seconds at the last take_cpu

    def take(self) -> tuple[float, float]:
        """(backward, collective) seconds since the last take."""
        taken = (self.backward_s, self.collective_s)
        self.backward_s = self.collective_s = 0.0
        return taken

    def take_cpu(self) -> float:
        """CPU seconds this process used (all its threads) since the last take: a slow rank that computes more,
        or one that gets less of a CPU than its own work needs (the doctor's likely cause)."""
        now = time.process_time()
        spent, self.cpu = now - self.cpu, now
        return spent


def _nbytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    first = args[0] if args else kwargs.get("tensor", kwargs.get("output_tensor"))
    if isinstance(first, list | tuple):
        first = first[0] if first else None
    try:
        return int(first.numel() * first.element_size())  # type: ignore[union-attr]
    except (AttributeError, TypeError, RuntimeError):
        return None


def _group(dist: Any, kwargs: dict[str, Any]) -> str:
    group = kwargs.get("group")
    if group is None:
        return "default"
    try:
        return str(dist.distributed_c10d._get_process_group_name(group)) or "default"
    except Exception:  # noqa: BLE001 - a name is a label: never worth a failed collective
        return "group"


def hook(torch: Any, clock: Clock) -> None:
    """Wrap ``torch.distributed``'s blocking collectives to time them into ``clock`` (once per process)."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not getattr(dist, "is_available", lambda: False)():
        return
    if clock.ledger is None:
        clock.ledger = Ledger(telemetry.run_dir())
    for name in TIMED:
        original = getattr(dist, name, None)
        if original is None or getattr(original, "__gpumon__", False):
            continue
        setattr(dist, name, _timed(dist, name, original, clock))


def _timed(dist: Any, name: str, original: Any, clock: Clock) -> Any:
    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("async_op"):
            return original(*args, **kwargs)
        group = _group(dist, kwargs)
        key = group if name not in P2P else f"{group} p2p"  # a pair's sends count apart from the group's
        seq = clock.seq[key] = clock.seq.get(key, 0) + 1
        caller = sys._getframe(1)
        where = f"{caller.f_code.co_filename.rsplit('/', 1)[-1]}:{caller.f_lineno}"
        record = {"op": name, "seq": seq, "group": group, "bytes": _nbytes(args, kwargs), "where": where}
        clock.started = record
        ledger = clock.ledger
        if ledger is not None:
            ledger.started(record)
        start = time.perf_counter()
        try:
            result = original(*args, **kwargs)
        finally:
            clock.collective_s += time.perf_counter() - start
            clock.finished = record
        if ledger is not None:
            ledger.finished()  # only one that returned: one that raised never finished
        return result

    collective.__gpumon__ = True  # type: ignore[attr-defined]
    return collective
