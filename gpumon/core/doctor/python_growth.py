"""Name what grows when it is not torch's: a tracemalloc window's ``pymem`` event (telemetry/pymem.py) as a cause.

The rank compared two snapshots some steps apart and put each growth on the script's own line; it also looked
for the dict or list that keeps what that line allocated. Here that becomes the doctor's cause: the line, the
holder and its fix (a bounded cache for a dict, clearing for a list). Pure Python: events in, causes out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpumon.core.doctor.cause import Cause
from gpumon.core.format import size

KIND = "python_objects"
CUDA_KIND = "cuda_allocations"
CUDA_FIX = (
    "find what keeps the tensors that line makes (a list, a dict, an attribute): drop them when done (`del`), or "
    "keep numbers (`.item()`) or a copy on the host (`.detach().cpu()`)"
)
PYTHON_FIX = (
    "bound what keeps them: a cache with a limit (`functools.lru_cache(maxsize=N)`), or clear the list once its "
    "items are used"
)


def python_causes(events: Iterable[Mapping[str, Any]]) -> dict[int, list[Cause]]:
    """Per rank, what its latest tracemalloc window saw grow (an empty list: it saw no line grow)."""
    latest: dict[int, Mapping[str, Any]] = {}
    for event in events:
        if event.get("type") == "pymem" and not event.get("error"):
            latest[_rank(event)] = event
    return {
        rank: [
            *(_cause(event, line, rank) for line in event.get("lines") or ()),
            *(_cuda_cause(event, line, rank) for line in event.get("cuda_lines") or ()),
        ]
        for rank, event in latest.items()
    }


def _cuda_cause(event: Mapping[str, Any], line: Mapping[str, Any], rank: int) -> Cause:
    """A line whose CUDA blocks grew in PyTorch's memory history (telemetry/cuda_history.py)."""
    at = f"{line.get('file')}:{line.get('line')}" + (f" ({line['function']})" if line.get("function") else "")
    steps = max(1, int(event.get("to") or 0) - int(event.get("step") or 0))
    kept = event.get("cuda_snapshot")
    evidence = (
        f"PyTorch's memory history over {steps} steps: +{size(int(line.get('bytes') or 0))} in {line.get('count')} "
        f"CUDA blocks allocated at {at} and still allocated, {size(int(line.get('per_step') or 0))} a step"
        + (f"; the snapshot is kept in the run's folder, {kept} (read: gpumon doctor RUN --snapshot)" if kept else "")
    )
    count, grew = int(line.get("count") or 0), int(line.get("bytes") or 0)
    title = f"{at} allocates GPU memory that stays"
    return Cause(CUDA_KIND, title, CUDA_FIX, evidence, rank=rank, steps=steps, count=count, bytes=grew)


def _cause(event: Mapping[str, Any], line: Mapping[str, Any], rank: int) -> Cause:
    where = f"{line.get('file')}:{line.get('line')}"
    function = str(line.get("function") or "")
    at = f"{where} ({function})" if function and function != "<module>" else where
    holder = line.get("holder") if isinstance(line.get("holder"), Mapping) else None
    steps = max(1, int(event.get("to") or 0) - int(event.get("step") or 0))
    evidence = (
        f"tracemalloc over {steps} steps ({event.get('step')} to {event.get('to')}, {event.get('seconds')} s): "
        f"+{size(int(line.get('bytes') or 0))} in {line.get('count')} blocks allocated at {at}"
        + (f", called from {line['via']}" if line.get("via") else "")
        + f", {size(int(line.get('per_step') or 0))} a step"
    )
    name = ""
    if holder is not None and holder.get("name"):
        name = str(holder["name"])
        evidence += f"; kept in `{name}`, a {holder.get('type')} of {holder.get('items')} items"
        title = f"`{name}` ({holder.get('type')}) keeps what {at} allocates, and grows"
    else:
        title = f"{at} allocates Python objects that stay"
    return Cause(
        kind=KIND,
        title=title,
        advice=_fix(name, str((holder or {}).get("type") or ""), function),
        evidence=evidence,
        rank=rank,
        steps=steps,
        count=int(line.get("count") or 0),
        bytes=int(line.get("bytes") or 0),
        holder=f"`{name}` in {holder.get('file') or line.get('file')}" if holder is not None and name else "",
    )


def _fix(name: str, kind: str, function: str) -> str:
    maker = f"`{function}`" if function and function != "<module>" else "the function that makes the entries"
    if kind == "dict":
        return (
            f"bound the cache: `@functools.lru_cache(maxsize=N)` on {maker} instead of keeping every entry in "
            f"`{name}` (N: the entries memory can hold), or evict the oldest past N: `{name}.pop(next(iter({name})))`"
        )
    if kind in ("list", "deque"):
        return (
            f"clear `{name}` once its items are used (`{name}.clear()` each epoch), or keep only the last N: "
            f"`{name} = collections.deque(maxlen=N)`"
        )
    return PYTHON_FIX


def _rank(event: Mapping[str, Any]) -> int:
    digits = str(event.get("src", ""))[4:]
    return int(digits) if digits.isdigit() else 0
