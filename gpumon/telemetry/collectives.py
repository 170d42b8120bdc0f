"""Time inside collectives, per rank, with no code: what tells the slow rank from the ranks that wait for it.

In lock-step data parallelism every rank's step takes as long as the slowest's, so the step time cannot name a
straggler. What differs is where the time goes: the slow rank spends longer in its own work, the others wait in
the collectives for it. Two clocks, both read around calls the script already makes:

- ``backward()``: DDP's reducer all-reduces the gradients inside it and waits for the last bucket at its end, so a
  rank that waits for a peer waits there (the doctor compares ranks: compute is alike, the surplus is waiting);
- the collectives of ``torch.distributed`` the script calls (``dist.all_reduce(t)``, ``barrier()``...), timed
  whole; an ``async_op=True`` call is timed at its call and in its ``work.wait()`` (the time between is the
  script's own work, overlapped), and it is finished when its work completes, waited for or not.

Each collective called also leaves its description (op, its number in its group, bytes, group, the caller's
file:line) as the rank's last one started and finished: what a hang verdict reads. Two ``perf_counter`` reads and
a frame's file and line a call: a few µs (bench/collective_clock.py, docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import time
from typing import Any

from gpumon import telemetry
from gpumon.core.collective_ledger import P2P
from gpumon.telemetry.coll_ledger import Ledger

# torch.distributed's collectives a script calls by name (the module's own attributes are wrapped, not
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
        self.pending: set[int] = set()  # ids of the async collectives' works not yet complete (their wait is timed)
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


class _Params:
    """Where a collective's arguments sit, read once from torch's own signature: a group passed by position is
    the same group as one passed by name."""

    def __init__(self, original: Any) -> None:
        try:
            names = list(inspect.signature(original).parameters)
        except (TypeError, ValueError):
            names = []
        self.first = names[0] if names and names[0] != "group" else None  # the tensor (or list) whose bytes count
        self.group = names.index("group") if "group" in names else -1
        self.async_op = names.index("async_op") if "async_op" in names else -1

    def get(self, index: int, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name in kwargs:
            return kwargs[name]
        return args[index] if 0 <= index < len(args) else None


def _nbytes(first: Any) -> int | None:
    if isinstance(first, list | tuple):
        first = first[0] if first else None
    try:
        return int(first.numel() * first.element_size())
    except (AttributeError, TypeError, RuntimeError):
        return None


def _group(dist: Any, group: Any) -> str:
    if group is None or group is getattr(dist.group, "WORLD", None):
        return "default"
    try:
        return str(dist.distributed_c10d._get_process_group_name(group)) or "default"
    except Exception:  # noqa: BLE001 - a name is a label: never worth a failed collective
        return "group"


def hook(torch: Any, clock: Clock) -> None:
    """Wrap ``torch.distributed``'s collectives to time them into ``clock`` (once per process)."""
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
    _time_waits(getattr(dist, "Work", None), clock)


def _time_waits(work_class: Any, clock: Clock) -> None:
    """Count the time the script blocks in an async collective's ``work.wait()`` (only the works the wrappers
    returned: torch's own waits, FSDP's inside backward(), are not the script's collectives)."""
    original = getattr(work_class, "wait", None)
    if original is None or getattr(original, "__gpumon__", False):
        return

    @functools.wraps(original)
    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) not in clock.pending:
            return original(self, *args, **kwargs)
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            clock.collective_s += time.perf_counter() - start

    wait.__gpumon__ = True  # type: ignore[attr-defined]
    with contextlib.suppress(AttributeError, TypeError):  # a Work type that cannot be patched: the call alone
        work_class.wait = wait


def _finish(clock: Clock, record: dict[str, Any], line: bytes) -> None:
    """``record`` returned (or its work completed): the last finished, unless a later one of its group already
    finished (async works may complete out of order)."""
    last = clock.finished
    if last is not None and last["group"] == record["group"] and last["seq"] > record["seq"]:
        return
    clock.finished = record
    if clock.ledger is not None:
        clock.ledger.finished(line)


def _on_complete(clock: Clock, work: Any, record: dict[str, Any], line: bytes) -> None:
    """Finish an async collective when its work completes (in the backend's thread), waited for or not."""
    key = id(work)

    def done(future: Any) -> None:
        clock.pending.discard(key)
        try:
            future.value()
        except Exception:  # noqa: BLE001 - it failed: never finished
            return
        _finish(clock, record, line)

    if len(clock.pending) > 4096:  # works whose completion is never told: never a growing set
        clock.pending.clear()
    clock.pending.add(key)
    try:
        work.get_future().add_done_callback(done)
    except Exception:  # noqa: BLE001 - a backend without futures: it stays started (a record never fails a call)
        clock.pending.discard(key)


def _timed(dist: Any, name: str, original: Any, clock: Clock) -> Any:
    params = _Params(original)

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        group = _group(dist, params.get(params.group, "group", args, kwargs))
        key = group if name not in P2P else f"{group} p2p"  # a pair's sends count apart from the group's
        seq = clock.seq[key] = clock.seq.get(key, 0) + 1
        caller = sys._getframe(1)
        where = f"{caller.f_code.co_filename.rsplit('/', 1)[-1]}:{caller.f_lineno}"
        first = params.get(0, params.first, args, kwargs) if params.first else None
        record = {"op": name, "seq": seq, "group": group, "bytes": _nbytes(first), "where": where}
        clock.started = record
        ledger = clock.ledger
        line = ledger.started(record) if ledger is not None else b""
        start = time.perf_counter()
        try:
            result = original(*args, **kwargs)
        finally:
            clock.collective_s += time.perf_counter() - start
        if params.get(params.async_op, "async_op", args, kwargs) and result is not None:
            _on_complete(clock, result, record, line)
        else:
            _finish(clock, record, line)  # only one that returned: one that raised never finished
        return result

    collective.__gpumon__ = True  # type: ignore[attr-defined]
    return collective
