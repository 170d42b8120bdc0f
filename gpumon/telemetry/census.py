"""A census of the live tensors of a training process, taken at a step boundary on request.

gpumon asks by writing ``control/census`` in the run directory (``request_census``); the
step hook's ``census_trigger.CensusTrigger`` takes the looks, each written as a ``census``
event (docs/events.md). A file, not a signal: a signal sent to a process without our
handler would kill it, and a handler could run in the middle of the script's own work.
This module imports no torch: the hook hands it the script's.

A census groups the tensors that ``gc.get_objects()`` finds by shape, dtype,
device, grad_fn and requires_grad, counts storage bytes once (by data_ptr), and
walks the autograd graphs that non-leaf tensors keep alive: nodes, saved
tensors still held, nodes already backwarded. Parameters are counted apart.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from itertools import compress
from types import ModuleType
from typing import Any

from gpumon.telemetry.holders import find_holders, skip_dirs

MAX_GROUPS = 50  # the event holds at most this many groups (by bytes, then by count and graph size)
MAX_NODES = 12_000  # graph nodes walked per census, at most
MAX_WALK_S = 0.15  # and at most this long: ages (not the walk) tell how big a kept graph is
DESCENT_BUDGET = 200_000  # hops of the oldest-node descent, over all roots (~1 us each)
MAX_DESCENT = 100_000  # hops from one root
LEAF_SEQ = 2**63  # AccumulateGrad and other leaves are numbered UINT64_MAX
HOLDER_SEARCHES = 2  # groups whose holder is looked for, by graph age and by count
MIN_HELD = 16  # a group this numerous may be a growing container (census_trigger.py: or a cleared one)


def take_census(torch: ModuleType, max_groups: int = MAX_GROUPS, max_nodes: int = MAX_NODES) -> dict[str, Any]:
    """The live tensors of this process, grouped; a dict ready to be a ``census`` event's fields."""
    # The walk makes thousands of wrapper objects: a collection of a big heap in the middle of it
    # would be part of the pause. Nothing here makes garbage cycles that must go at once.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _take_census(torch, max_groups, max_nodes)
    finally:
        if enabled:
            gc.enable()


def _take_census(torch: ModuleType, max_groups: int, max_nodes: int) -> dict[str, Any]:
    started = time.perf_counter()
    # Exact types against the set of Tensor subclasses: twice as fast as isinstance over ~10^5
    # objects, and type() never runs a proxy's __class__ property.
    objects = gc.get_objects()
    tensors = list(compress(objects, map(_subclasses(torch.Tensor).__contains__, map(type, objects))))
    del objects
    now = _sequence_now(torch)
    param_type = torch.nn.Parameter
    seen: set[int] = set()  # storages counted already
    params = [0, 0]
    grads: set[int] = set()  # a parameter's .grad is the optimizer's, never a holder to look for
    for t in tensors:  # parameters first: a view of a weight is the weight's memory
        if issubclass(type(t), param_type):
            params[0] += 1
            params[1] += _new_bytes(t, seen)
            grads.add(id(t.grad))
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    found: list[tuple[Any, dict[str, Any], Any]] = []  # (tensor, its group, grad_fn)
    names: dict[Any, str] = {}  # dtype or device -> its text: str() of each costs more than the rest of a key
    for t in tensors:
        if issubclass(type(t), param_type):
            continue
        try:
            grad_fn = t.grad_fn
            name = type(grad_fn).__name__ if grad_fn is not None else None
            dtype, device = t.dtype, t.device
            if dtype not in names:
                names[dtype] = str(dtype).removeprefix("torch.")
            if device not in names:
                names[device] = str(device)
            key = (tuple(t.shape), names[dtype], names[device], name, t.requires_grad)
        except Exception:  # noqa: BLE001 - odd subclasses (fake, functorch) are skipped
            continue
        found.append((t, groups.get(key) or groups.setdefault(key, _group(*key)), grad_fn))
    del tensors
    # Oldest graphs first in nothing: youngest first, so that a graph kept for 10^7 nodes takes
    # what the budget leaves, and every healthy graph is walked whole.
    ages = _ages([grad_fn for _, _, grad_fn in found if grad_fn is not None], now)
    order = sorted({grad_fn for _, _, grad_fn in found if grad_fn is not None}, key=lambda g: ages.get(g, 0))
    nodes, truncated = _walk(order, max_nodes)
    # Activations a graph saved keep their Python objects alive (torch preserves them while the
    # graph holds the tensor): they are the graph's memory, not tensors someone kept.
    held = {_storage(t)[0] for saved, _, _ in nodes.values() for t in saved} - {0}
    roots: list[tuple[dict[str, Any], Any]] = []
    samples: dict[int, Any] = {}  # id(group) -> its tensor with the oldest graph (or any), for holders
    for t, group, grad_fn in found:
        if _storage(t)[0] in held:
            continue
        group["count"] += 1
        group["bytes"] += _new_bytes(t, seen)
        if grad_fn is not None:
            roots.append((group, grad_fn))
            age = ages.get(grad_fn, 0)
            if age >= group["age"]:
                group["age"] = age
                samples[id(group)] = t
        elif id(t) not in grads:
            samples.setdefault(id(group), t)
    del found
    _attribute(roots, nodes, seen)
    del roots, nodes
    ranked = _top([g for g in groups.values() if g["count"]], max_groups)
    for group in ranked:
        group["saved_shapes"] = [list(s) for s, _ in group["saved_shapes"].most_common(3)]  # by bytes
    skip_dirs(torch)
    _name_holders(ranked, samples)
    return {
        "tensors": sum(g["count"] for g in groups.values()),
        "bytes": sum(g["bytes"] + g["saved_bytes"] for g in groups.values()),
        "params": {"count": params[0], "bytes": params[1]},
        "groups_total": sum(1 for g in groups.values() if g["count"]),
        "nodes": sum(g["nodes"] for g in groups.values()),
        "truncated": truncated,
        "autograd_seq": now,  # autograd's node counter now: ages in steps, with the step
        "groups": ranked,
        "ms": round((time.perf_counter() - started) * 1e3, 2),
    }


def _sequence_now(torch: ModuleType) -> int:
    """Autograd's node counter of this thread: every node created gets the next number."""
    try:
        with torch.enable_grad():
            probe = torch.empty(0, requires_grad=True) * 1
        return int(probe.grad_fn._sequence_nr())
    except Exception:  # noqa: BLE001 - a private counter: without it, ages are unknown (0)
        return 0


def _ages(roots: list[Any], now: int) -> dict[Any, int]:
    """Per root node: how many nodes were created since the oldest node its graph reaches.

    Not a walk: from each root, follow the child created first (the lowest sequence number). A
    graph kept step after step (``running_loss += loss``) is a chain whose oldest link this
    reaches in one pass per step kept, whatever the nodes per step. Leaves (AccumulateGrad,
    numbered 2^64-1) have no age.
    """
    ages: dict[Any, int] = {}
    budget = DESCENT_BUDGET
    for root in roots:
        if root in ages or budget <= 0 or not now:
            continue
        oldest = _seq(root)
        node, hops = root, 0
        while budget > 0 and hops < MAX_DESCENT:
            budget -= 1
            hops += 1
            try:
                kids = [n for n, _ in node.next_functions if n is not None]
            except (AttributeError, RuntimeError):
                break
            numbered = [(s, n) for n in kids if (s := _seq(n)) < LEAF_SEQ]
            if not numbered:
                break
            seq, node = min(numbered, key=lambda pair: pair[0])
            oldest = min(oldest, seq)
        if oldest < LEAF_SEQ:
            ages[root] = max(0, now - oldest)
    return ages


def _seq(node: Any) -> int:
    try:
        return int(node._sequence_nr())
    except Exception:  # noqa: BLE001
        return LEAF_SEQ


def _name_holders(ranked: list[dict[str, Any]], samples: dict[int, Any]) -> None:
    """Who holds the oldest graphs and the most numerous groups: at most a few searches per census."""
    by_age = sorted((g for g in ranked if g["age"]), key=lambda g: g["age"], reverse=True)[:HOLDER_SEARCHES]
    by_count = sorted((g for g in ranked if g["count"] >= MIN_HELD), key=lambda g: g["count"], reverse=True)
    for group in {id(g): g for g in [*by_age, *by_count[:HOLDER_SEARCHES]]}.values():
        sample = samples.get(id(group))
        if sample is None:
            continue
        try:
            group["holders"] = find_holders(sample, {id(samples), id(ranked), id(by_age), id(by_count)})
        except Exception:  # noqa: BLE001 - naming is a courtesy; the census stands without it
            continue


def _group(shape: tuple[int, ...], dtype: str, device: str, grad_fn: str | None, requires_grad: bool) -> dict[str, Any]:
    return {
        "shape": list(shape),
        "dtype": dtype,
        "device": device,
        "grad_fn": grad_fn,
        "requires_grad": requires_grad,
        "count": 0,
        "age": 0,  # nodes created since the oldest node its tensors' graphs reach (see _ages)
        "bytes": 0,  # storage bytes, each storage counted once in the whole census
        "nodes": 0,  # graph nodes reached first from this group's tensors
        "saved_bytes": 0,  # tensors those nodes still hold for backward (not counted elsewhere)
        "freed_nodes": 0,  # nodes whose saved tensors backward already freed
        "saved_shapes": Counter(),
    }


def _subclasses(cls: type) -> set[type]:
    found: set[type] = {cls}
    stack: list[type] = [cls]
    while stack:
        sub: type
        for sub in stack.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                stack.append(sub)
    return found


def _storage(t: Any) -> tuple[int, int]:
    """(data_ptr, nbytes) of a tensor's storage; (0, 0) for sparse, meta or wrapper tensors.

    ``untyped_storage()`` costs ~27 us the first time per tensor (it makes the storage's Python
    object): only views, whose storage is bigger than they are, pay it.
    """
    try:
        if t._is_view():
            storage = t.untyped_storage()
            return storage.data_ptr(), int(storage.nbytes())
        return t.data_ptr() - t.storage_offset() * t.element_size(), int(t.nbytes)
    except Exception:  # noqa: BLE001
        return 0, 0


def _new_bytes(t: Any, seen: set[int]) -> int:
    ptr, nbytes = _storage(t)
    if ptr in seen:
        return 0
    if ptr:
        seen.add(ptr)
    return nbytes


_SAVED: dict[type, list[str]] = {}  # node class -> its raw saved-tensor attribute names
NodeInfo = tuple[list[Any], bool, list[Any]]  # (saved tensors still held, backward freed them, next nodes)


def _walk(roots: list[Any], budget: int) -> tuple[dict[Any, NodeInfo], bool]:
    """Every node reachable from ``roots``, once, root by root in order, until ``budget`` nodes or
    ``MAX_WALK_S`` (a node costs 5-45 us: more when millions are alive and memory is cold)."""
    nodes: dict[Any, NodeInfo] = {}
    deadline = time.perf_counter() + MAX_WALK_S
    for root in roots:
        stack = [root]
        while stack:
            node = stack.pop()
            if node in nodes:
                continue
            if len(nodes) >= budget or (not len(nodes) % 256 and time.perf_counter() > deadline):
                return nodes, True
            try:
                kids = [n for n, _ in node.next_functions if n is not None]
            except (AttributeError, RuntimeError):
                kids = []
            nodes[node] = (*_saved(node), kids)
            stack.extend(kids)
    return nodes, False


def _saved(node: Any) -> tuple[list[Any], bool]:
    """The tensors a node saved for backward, and whether backward freed them all.

    ``_raw_saved_*.data`` reads a saved tensor as a fresh alias (None once freed): no exception to
    catch, no unpack hook run (offloading hooks would copy), no version check.
    """
    names = _SAVED.get(type(node))
    if names is None:
        names = _SAVED[type(node)] = [a for a in dir(node) if a.startswith("_raw_saved_")]
    saved: list[Any] = []
    slots = 0
    for name in names:
        try:
            raw = getattr(node, name)
        except Exception:  # noqa: BLE001
            continue
        for item in raw if isinstance(raw, tuple | list) else (raw,):
            slots += 1
            tensor = getattr(item, "data", None)
            if tensor is not None:
                saved.append(tensor)
    return saved, slots > 0 and not saved


def _attribute(roots: list[tuple[dict[str, Any], Any]], nodes: dict[Any, NodeInfo], seen: set[int]) -> None:
    """Give each node to one group: roots no other graph contains go first (a running total before its parts)."""
    inner = {kid for _, _, kids in nodes.values() for kid in kids}
    claimed: set[Any] = set()
    for group, root in sorted(roots, key=lambda r: r[1] in inner):
        stack = [root]
        while stack:
            node = stack.pop()
            if node in claimed or node not in nodes:
                continue
            claimed.add(node)
            saved, freed, kids = nodes[node]
            group["nodes"] += 1
            group["freed_nodes"] += freed
            for t in saved:
                added = _new_bytes(t, seen)
                if added:
                    group["saved_bytes"] += added
                    group["saved_shapes"][tuple(t.shape)] += added
            stack.extend(kids)


def _top(groups: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The biggest groups by bytes, plus the most numerous and the largest graphs (a leak of tiny tensors)."""
    by_bytes = sorted(groups, key=lambda g: g["bytes"] + g["saved_bytes"], reverse=True)
    picked = {id(g): g for g in by_bytes[: limit - limit // 4]}
    for key in ("count", "nodes"):
        for g in sorted(groups, key=lambda g: g[key], reverse=True)[: limit // 8]:
            picked.setdefault(id(g), g)
    for g in by_bytes:
        if len(picked) >= limit:
            break
        picked.setdefault(id(g), g)
    return sorted(picked.values(), key=lambda g: g["bytes"] + g["saved_bytes"], reverse=True)
