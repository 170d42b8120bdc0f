"""Who keeps the objects a line allocated: the script's dict or list, found by where tracemalloc saw its newest
items allocated, and named as the census names a tensor's holder (holders.py).

First the script's own namespaces: the locals of its frames on every thread's stack, then its modules' globals,
each value and each attribute of a value (``self.cache``). A dict that holds only bytes, strings and numbers is
not tracked by gc (CPython untracks it), so ``gc.get_objects`` alone would miss the commonest cache; it is the
fallback, for containers held deeper, within a time budget.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc
from collections import deque
from itertools import compress
from types import FrameType, ModuleType
from typing import Any

from gpumon.core.runs.reading.cuda_snapshot import script_file as _script
from gpumon.telemetry.holders import _forget, find_holders

MIN_ITEMS = 8  # a container with fewer items is not a growing cache
NEWEST = 3  # items of a container asked where they were allocated (its newest: a cache's latest entries)
_KINDS = frozenset((dict, list, deque))


def find_holder(path: str, lineno: int, deadline: float) -> dict[str, Any] | None:
    """The container that keeps what ``path:lineno`` allocated: ``name``, ``type``, ``items``, and where the name
    is (``file``, ``line``, ``function``) when it is a frame's; None if not found by ``deadline``."""
    return _on_stacks(path, lineno) or _in_modules(path, lineno) or _in_gc(path, lineno, deadline)


def _on_stacks(path: str, lineno: int) -> dict[str, Any] | None:
    tops = list(sys._current_frames().values())
    frame: FrameType | None = None
    try:
        for frame in tops:
            while frame is not None:
                code = frame.f_code
                if _script(code.co_filename):
                    names = frame.f_locals
                    try:
                        found = _in_names(names, path, lineno)
                    finally:
                        _forget(code, names)
                    if found is not None:
                        where = {"file": os.path.basename(code.co_filename), "line": frame.f_lineno}
                        return {**found, **where, "function": code.co_name}
                frame = frame.f_back
    finally:
        tops.clear()  # this frame's object is in it: a cycle
        frame = None
    return None


def _in_modules(path: str, lineno: int) -> dict[str, Any] | None:
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if isinstance(filename, str) and _script(filename):
            found = _in_names(vars(module), path, lineno)
            if found is not None:
                return {**found, "file": os.path.basename(filename)}
    return None


def _in_names(names: Any, path: str, lineno: int) -> dict[str, Any] | None:
    for name, value in list(names.items()):
        if _keeps(value, path, lineno):
            return _described(str(name), value)
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, dict) and not isinstance(value, type | ModuleType):
            for attr, item in list(attrs.items()):
                if _keeps(item, path, lineno):
                    return _described(f"{name}.{attr}", item)
    return None


def _in_gc(path: str, lineno: int, deadline: float) -> dict[str, Any] | None:
    everything = gc.get_objects()
    # Exact types, filtered in C (as the census does): a Python loop over 10^6 objects costs 0.3 s.
    containers = list(compress(everything, map(_KINDS.__contains__, map(type, everything))))
    everything.clear()
    try:
        for index, obj in enumerate(containers):
            if not index % 1024 and time.perf_counter() > deadline:
                return None
            if _keeps(obj, path, lineno):
                holders = find_holders(obj, {id(containers)}, limit=1)
                named = holders[0] if holders else {"name": f"a {type(obj).__name__}"}
                return {**_described(str(named["name"]), obj), **{k: v for k, v in named.items() if k != "name"}}
    finally:
        containers.clear()
    return None


def _keeps(value: Any, path: str, lineno: int) -> bool:
    kind = type(value)
    if kind not in _KINDS or len(value) < MIN_ITEMS:
        return False
    try:
        if kind is dict:
            newest = reversed(value.values())
            items = [next(newest) for _ in range(NEWEST)]
        else:
            items = [value[-i] for i in range(1, NEWEST + 1)]
    except (RuntimeError, StopIteration, IndexError):  # changed under us (another thread)
        return False
    return any(_allocated_at(item, path, lineno) for item in items)


def _allocated_at(obj: Any, path: str, lineno: int) -> bool:
    where = tracemalloc.get_object_traceback(obj)
    return where is not None and any(f.filename == path and f.lineno == lineno for f in where)


def _described(name: str, container: Any) -> dict[str, Any]:
    return {"name": name, "type": type(container).__name__, "items": len(container)}
