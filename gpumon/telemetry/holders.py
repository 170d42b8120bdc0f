"""Who holds a tensor: the script's variable, container or attribute, with its function and file:line.

A census finds *what* grows (a graph, a group of tensors); the user needs *where*. The
holder is looked for first on the live stacks (the training loop's frame is suspended in
the optimizer's step while the census runs): a local or global bound to the tensor, a list,
tuple, dict, set or deque that contains it, or an object attribute. Failing that,
``gc.get_referrers`` finds the dict or list that holds it and, one level up, what holds
that. The line given is where the name is accumulated (``x += ...``, ``x.append(...)``)
in the function's code, where Python can tell, else the line the frame is at.
"""

from __future__ import annotations

import dis
import gc
import inspect
import os
import sys
from collections import deque
from types import CodeType, FrameType, ModuleType
from typing import Any

MAX_ITEMS = 100_000  # a container bigger than this is not scanned item by item
_CONTAINERS = (list, tuple, set, frozenset, deque)
_SKIP_DIRS: tuple[str, ...] = ()  # gpumon's and torch's own frames hold tensors too; never name them
_TO_NUMBER = frozenset({"item", "tolist", "float", "int"})
_LINES: dict[tuple[CodeType, str], int | None] = {}


def skip_dirs(*modules: ModuleType) -> None:
    """Frames from these packages' folders are never holders (set once, by the census)."""
    global _SKIP_DIRS
    if _SKIP_DIRS:
        return
    folders = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # the gpumon package
    for module in modules:
        folders.add(os.path.dirname(os.path.abspath(module.__file__ or "")))
    _SKIP_DIRS = tuple(f + os.sep for f in folders)


def find_holders(target: Any, ignore: set[int], limit: int = 2) -> list[dict[str, Any]]:
    """Up to ``limit`` holders of ``target``, nearest first; ``ignore``: ids of the census's own containers."""
    return _on_stacks(target, limit) or _by_referrers(target, ignore, limit)


def _on_stacks(target: Any, limit: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    tops = list(sys._current_frames().values())  # frame objects, this one's included: a cycle
    frame: FrameType | None = None
    try:
        for frame in tops:
            while frame is not None and len(found) < limit:
                code = frame.f_code
                if not code.co_filename.startswith(_SKIP_DIRS):
                    names = frame.f_locals
                    try:
                        for name, value in list(names.items()):
                            how = _holds(value, target)
                            if how is not None:
                                found.append(_frame_holder(frame, name, how))
                                break
                    finally:
                        _forget(code, names)
                frame = frame.f_back
    finally:
        # This frame's object refers to itself through ``tops``: left as is, the cycle would keep
        # ``target`` (a step's tensor with its graph) alive until the next gc collection.
        tops.clear()
        frame = None
    return found


def _forget(code: CodeType, names: Any) -> None:
    """Drop a function frame's locals snapshot (Python < 3.13 caches it on the frame, keeping this
    step's tensors alive until the frame ends). Safe: the snapshot is a copy, re-read before any
    write-back (a tracer's). Never a module's namespace, never 3.13's write-through proxy."""
    if type(names) is dict and code.co_flags & inspect.CO_OPTIMIZED:
        names.clear()


def _holds(value: Any, target: Any) -> str | None:
    """How ``value`` holds ``target``: "" itself, "[...]" as an item, ".attr" as an attribute; None: not."""
    if value is target:
        return ""
    if isinstance(value, _CONTAINERS) and len(value) <= MAX_ITEMS:
        return "[...]" if any(v is target for v in value) else None
    if isinstance(value, dict):
        if len(value) > MAX_ITEMS:
            return None
        for key, item in value.items():
            if item is target:
                return f"[{key!r}]" if isinstance(key, str | int) else "[...]"
        return None
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(value, type | ModuleType):
        for key, item in attrs.items():
            if item is target:
                return f".{key}"
            if isinstance(item, list | deque) and len(item) <= MAX_ITEMS and any(v is target for v in item):
                return f".{key}[...]"
    return None


def _frame_holder(frame: FrameType, name: str, how: str) -> dict[str, Any]:
    code = frame.f_code
    line = accumulated_at(code, name) or frame.f_lineno
    return {
        "name": f"{name}{how}",
        "file": os.path.basename(code.co_filename),
        "line": line,
        "function": code.co_name,
    }


def accumulated_at(code: CodeType, name: str) -> int | None:
    """The first line of ``code`` where ``name`` is added to (``name += ...``, ``name.append(...)``)."""
    key = (code, name)
    if key not in _LINES:
        _LINES[key] = _scan(code, name)
    return _LINES[key]


def _scan(code: CodeType, name: str) -> int | None:
    line = None
    recent: list[dis.Instruction] = []  # the last few instructions, newest last
    numbers: int | None = None  # ``name += x.item()``: a number, not what keeps a graph
    stored: int | None = None
    for ins in dis.get_instructions(code):
        if ins.positions is not None and ins.positions.lineno is not None:
            line = ins.positions.lineno
        previous = recent[-1] if recent else None
        if ins.opname.startswith("STORE_") and ins.argval == name and previous is not None:
            if previous.opname == "BINARY_OP" and previous.argrepr.endswith("="):
                if not any(i.argval in _TO_NUMBER for i in recent[-6:]):
                    return line
                numbers = numbers or line
            stored = stored or line
        if (
            previous is not None
            and previous.opname.startswith("LOAD_")
            and previous.argval == name
            and ins.opname in ("LOAD_METHOD", "LOAD_ATTR")
            and ins.argval in ("append", "extend", "add", "appendleft", "update", "__setitem__")
        ):
            return line
        recent = [*recent[-7:], ins]
    for const in code.co_consts:  # a comprehension or nested function using the outer name
        if isinstance(const, CodeType):
            inner = _scan(const, name)
            if inner is not None:
                return inner
    return numbers or stored


def _by_referrers(target: Any, ignore: set[int], limit: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    referrers = [r for r in gc.get_referrers(target) if id(r) not in ignore]
    try:
        _name_referrers(target, referrers, ignore | {id(referrers)}, limit, found)
    finally:
        referrers.clear()  # it may hold frames that hold it
    return found


def _name_referrers(
    target: Any, referrers: list[Any], ignore: set[int], limit: int, found: list[dict[str, Any]]
) -> None:
    for ref in referrers:
        if isinstance(ref, dict):
            owner = _dict_owner(ref, ignore | {id(referrers)})
            key = next((k for k, v in ref.items() if v is target), "?")
            if owner is not None:
                found.append({"name": f"{owner}.{key}" if owner else str(key)})
        elif isinstance(ref, list | deque):
            outer = _on_stacks(ref, 1) or _by_referrers(ref, ignore, 1)
            if outer and outer[0]["name"].endswith("[...]"):
                outer = []  # a list in a list: say the outer one's name only once
            name = outer[0]["name"] if outer else f"a {type(ref).__name__} of {len(ref)} items"
            found.append({**(outer[0] if outer else {}), "name": f"{name}[...]"})
        if len(found) >= limit:
            break


def _dict_owner(mapping: dict[Any, Any], ignore: set[int]) -> str | None:
    """ "module" for a module's globals, "ClassName" for an instance's __dict__, None if neither."""
    for module in list(sys.modules.values()):
        if getattr(module, "__dict__", None) is mapping:
            return module.__name__
    for ref in gc.get_referrers(mapping):
        if id(ref) not in ignore and getattr(ref, "__dict__", None) is mapping:
            return type(ref).__name__
    return None
