"""Name what leaks: two censuses of live tensors (``census`` events) of one rank, diffed.

A census (gpumon/telemetry/census.py) groups a process's tensors by shape, dtype,
device, grad_fn and requires_grad, with the autograd graphs they keep alive. The
groups that grew between the two censuses of a request say which pattern it is:

- a scalar with a grad_fn whose graph grows, its saved tensors already freed by
  backward: the loss accumulated with its graph (``total_loss += loss``);
- tensors with a grad_fn whose graphs were never backwarded and hold saved
  activations: evaluation without ``torch.no_grad()`` keeping its outputs;
- more and more tensors without a grad_fn, of one shape: a list of outputs kept.

Pure Python: event dicts in, ``Cause`` objects out.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

from gpumon.core.doctor.cause import Cause
from gpumon.core.doctor.python_growth import CUDA_FIX, PYTHON_FIX, python_causes
from gpumon.core.events import EventReader
from gpumon.core.format import size
from gpumon.core.protocol import KEPT_STEPS, census_group

KINDS = (
    "eval_no_grad",
    "loss_graph",
    "graph_kept",
    "outputs_list",
    "growing_tensors",
    "python_objects",
    "cuda_allocations",
)
NODE_BYTES = 700  # heap per kept graph node, measured: +5.6 KB per step for 8 nodes of a small MLP
MIN_COUNT = 3  # fewer new tensors is the batch-to-batch churn of a healthy loop
MIN_NODES = 20
MIN_SAVED = 1024  # saved-tensor bytes gained: graphs that still hold activations
MIN_BYTES = 1 << 20  # a group present at both looks that gained this much grows, however few its tensors

TITLES = {
    "eval_no_grad": "evaluation without torch.no_grad() keeps activations",
    "loss_graph": "loss accumulated with its autograd graph",
    "graph_kept": "outputs kept with their autograd graph",
    "outputs_list": "a growing list of tensors kept on {device}",
    "growing_tensors": "more and more tensors",
}
HELD = {  # the title when the census named who holds it
    "eval_no_grad": "evaluation outputs with their activations (evaluation without torch.no_grad())",
    "loss_graph": "every step's autograd graph (the loss accumulated as a tensor)",
    "graph_kept": "outputs with their autograd graphs",
    "outputs_list": "a growing collection of tensors on {device}",
    "growing_tensors": "more and more tensors",
}
LOSS_FIX = (
    "accumulate a number: `{name} += loss.item()` (or `loss.detach()`); a loss tensor keeps every step's graph alive"
)
ADVICE = {
    "eval_no_grad": "run evaluation under `with torch.no_grad():` (or `torch.inference_mode()`) and keep "
    "`loss.item()`, not the loss tensor",
    "loss_graph": LOSS_FIX.format(name="total_loss"),  # a census that found the variable names it instead
    "graph_kept": "keep `out.detach()` (`.detach().cpu()` off the GPU), or reduce it to numbers with "
    "`.item()` / `.tolist()`",
    "outputs_list": "reduce each batch to numbers as you go (`.item()`, a running sum), move what you must "
    "keep off the device (`.detach().cpu()`), or `del` it when done",
    "growing_tensors": "find who keeps them: these shapes are created each step and never dropped",
    "python_objects": PYTHON_FIX,
    "cuda_allocations": CUDA_FIX,
}


def advice_for(kind: str, holder: Mapping[str, Any] | None = None) -> str:
    """The fix for ``kind``, in the script's own name where the census found the variable that holds it."""
    name = str((holder or {}).get("name") or "")
    if kind == "loss_graph" and name.replace(".", "_").isidentifier():
        return LOSS_FIX.format(name=name)
    return ADVICE[kind]


def _shape(group: Mapping[str, Any]) -> str:
    dims = group.get("shape") or []
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(str(d) for d in dims)})"


def _numel(group: Mapping[str, Any]) -> int:
    n = 1
    for d in group.get("shape") or []:
        n *= int(d)
    return n


def holder_text(group: Mapping[str, Any]) -> str:
    """The census's first holder of a group in words: "`running_loss` in train.py:90 (train_epoch)"."""
    holders = group.get("holders") or []
    if not holders or not isinstance(holders[0], Mapping) or not holders[0].get("name"):
        return ""
    first = holders[0]
    where = f" in {first['file']}:{first.get('line', '?')}" if first.get("file") else ""
    function = f" ({first['function']})" if first.get("function") and first["function"] != "<module>" else ""
    return f"`{first['name']}`{where}{function}"


def _rate(census: Mapping[str, Any]) -> float:
    """Autograd nodes created per step in this process, on average (0: unknown)."""
    seq, step = int(census.get("autograd_seq") or 0), int(census.get("step") or 0)
    return seq / step if seq and step else 0.0


def _kept(first: Mapping[str, Any], second: Mapping[str, Any], old: Mapping[str, Any], group: Mapping[str, Any]) -> int:
    """Nodes a group's graph gained by reaching further back in time: >0 for a graph kept step after step.

    The census walks a bounded number of nodes, so a graph of 10^7 nodes is measured by its age
    (nodes created since the oldest node it reaches): kept graphs age as fast as nodes are made. Only
    then: a graph held unchanged ages as fast (``epoch_loss`` keeping the last epoch's), and when both
    walks were whole, its nodes say it did not grow.
    """
    if not first.get("truncated") and not second.get("truncated"):
        return 0
    made = int(second.get("autograd_seq") or 0) - int(first.get("autograd_seq") or 0)
    age, rate = int(group.get("age") or 0), _rate(second)
    if made <= 0 or not rate or age < KEPT_STEPS * rate:
        return 0
    gained = age - int(old.get("age") or 0)
    return gained if gained >= made / 2 else 0


def _kind(group: Mapping[str, Any], count: int, nodes: int, saved: int, large: bool, grown: int) -> str | None:
    """What a group's growth is. ``large``: it was there at the first look and gained ``MIN_BYTES``: a few big
    tensors (an evaluation's outputs, each holding 16 MiB of activations) count, not only many small ones. Tensors
    without a graph that add no bytes are views of storage already counted (a DDP run under load showed +4 bias-
    shaped views in 20 steps, +0 B): nothing is kept through them."""
    many = count >= MIN_COUNT or (large and count > 0)
    if group.get("grad_fn"):
        if saved >= MIN_SAVED and (many or nodes >= MIN_NODES):
            return "eval_no_grad"
        if nodes >= MIN_NODES or many:
            return "loss_graph" if _numel(group) <= 1 else "graph_kept"
        return None
    if many and grown > 0:
        return "growing_tensors" if group.get("requires_grad") else "outputs_list"
    return None


def _evidence(kind: str, group: Mapping[str, Any], count: int, nodes: int, saved: int, steps: int) -> str:
    what = f"{_shape(group)} {group.get('dtype')}"
    if group.get("grad_fn"):
        what += f" with {group['grad_fn']}"
    graph = f"+{nodes} nodes, ≈{size(nodes * NODE_BYTES)}"
    if kind == "eval_no_grad":
        shapes = ", ".join(_shape({"shape": s}) for s in group.get("saved_shapes") or [])
        held = f"+{size(saved)} of saved activations" + (f" (shapes {shapes})" if shapes else "")
        tensors = "1 tensor" if count == 1 else f"{count} tensors"
        return f"+{tensors} of shape {what} in {steps} steps, never backwarded, their graphs holding {held}"
    if kind in ("loss_graph", "graph_kept") and count <= 0:
        total = int(group.get("count", 1))
        tensors = "1 tensor" if total == 1 else f"{total} tensors"
        keep = "keeps" if total == 1 else "keep"
        rate, age = float(group.get("_rate") or 0), int(group.get("age") or 0)
        back = f", reaching back {age / rate:,.0f} steps (≈{age:,} nodes)" if rate and age else ""
        return (
            f"{tensors} of shape {what} {keep} a graph that grew in {steps} steps "
            f"({graph}, {nodes / steps:,.0f}/step){back}"
        )
    if kind in ("loss_graph", "graph_kept"):
        return f"+{count} tensors of shape {what} in {steps} steps, each keeping its step's graph ({graph})"
    grown = int(group.get("_bytes", 0))
    per_step = f"{size(grown / steps)} per step"
    return f"+{count} tensors of shape {what} on {group.get('device')} in {steps} steps, +{size(grown)} ({per_step})"


def diff_census(first: Mapping[str, Any], second: Mapping[str, Any], rank: int = 0) -> list[Cause]:
    """The causes two censuses of one rank show, biggest first (empty: nothing grew)."""
    steps = max(1, int(second.get("step", 0)) - int(first.get("step", 0)))
    before = {census_group(g): g for g in first.get("groups") or []}
    cut = int(first.get("groups_total", 0)) > len(before)  # a group missing may have been left out
    found: dict[str, list[tuple[int, int, int, int, dict[str, Any]]]] = {}
    for group in second.get("groups") or []:
        old = before.get(census_group(group))
        if old is None and cut:
            continue
        old = old or {}
        count = int(group.get("count", 0)) - int(old.get("count", 0))
        nodes = max(int(group.get("nodes", 0)) - int(old.get("nodes", 0)), _kept(first, second, old, group))
        saved = int(group.get("saved_bytes", 0)) - int(old.get("saved_bytes", 0))
        grown = int(group.get("bytes", 0)) - int(old.get("bytes", 0)) + max(0, saved)
        large = int(old.get("count", 0)) > 0 and grown >= MIN_BYTES  # a group that was there, and grew a lot
        kind = _kind(group, count, nodes, saved, large, grown)
        if kind is not None:
            estimate = grown + (nodes * NODE_BYTES if kind in ("loss_graph", "graph_kept") else 0)
            found.setdefault(kind, []).append(
                (estimate, count, nodes, saved, {**group, "_bytes": grown, "_rate": _rate(second)})
            )
    causes = []
    for kind, groups in found.items():
        groups.sort(key=lambda g: g[0], reverse=True)
        device = groups[0][4].get("device", "the device")
        held = next((g[4] for g in groups if holder_text(g[4])), None)
        holder = holder_text(held) if held is not None else ""
        title = TITLES[kind].format(device=device)
        causes.append(
            Cause(
                kind=kind,
                title=f"{holder} keeps {HELD[kind].format(device=device)}" if holder else title,
                holder=holder,
                advice=advice_for(kind, (held.get("holders") or [None])[0] if held is not None else None),
                evidence="; ".join(_evidence(kind, g, c, n, s, steps) for _, c, n, s, g in groups[:3]),
                rank=rank,
                steps=steps,
                count=sum(g[1] for g in groups),
                bytes=sum(g[0] for g in groups),
                nodes=sum(g[2] for g in groups),
            )
        )
    return sorted(causes, key=lambda c: c.bytes, reverse=True)


def _rank(event: Mapping[str, Any]) -> int:
    digits = str(event.get("src", ""))[4:]
    return int(digits) if digits.isdigit() else 0


Choice = tuple[Mapping[str, Any], Mapping[str, Any], list[Cause]]  # the two looks the doctor reads, their causes


def _requests(events: Iterable[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """Per rank, the looks (by seq) of its latest request whose looks ended: a look after the first that
    promises no other (``again``). Looks that failed are left out."""
    looks: dict[tuple[int, Any], dict[int, Mapping[str, Any]]] = {}
    ended: dict[int, tuple[int, Any]] = {}
    for event in events:  # event order: later requests win
        if event.get("type") != "census":
            continue
        key, seq = (_rank(event), event.get("request")), int(event.get("seq", 0))
        if not event.get("error"):
            looks.setdefault(key, {})[seq] = event
        if seq >= 2 and not event.get("again"):
            ended[key[0]] = key
    return {rank: [look for _, look in sorted(looks.get(key, {}).items())] for rank, key in ended.items()}


def _chosen(looks: list[Mapping[str, Any]], rank: int) -> Choice:
    """The pair of looks whose diff tells what grows, with its causes (``looks`` hold one such pair at least).

    A pair that straddled a release (its second look says ``released``: a graph freed, a list cleared)
    sees nothing grow, or a graph that moved to another variable: the pairs within one cycle come first,
    each in turn, then the others; the first to name a cause is the answer, else the last pair (nothing).
    """
    pairs = _consecutive(looks)
    for a, b in sorted(pairs, key=lambda pair: bool(pair[1].get("released"))):
        found = diff_census(a, b, rank)
        if found:
            return a, b, found
    a, b = pairs[-1]
    return a, b, []


def _consecutive(looks: list[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    return [(a, b) for a, b in pairwise(looks) if int(b.get("seq", 0)) == int(a.get("seq", 0)) + 1]


def _choices(events: Iterable[Mapping[str, Any]]) -> dict[int, Choice]:
    return {rank: _chosen(looks, rank) for rank, looks in sorted(_requests(events).items()) if _consecutive(looks)}


def census_pairs(events: Iterable[Mapping[str, Any]]) -> dict[int, tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Per rank, the two looks of its latest ended request that the doctor reads (``_chosen``)."""
    return {rank: (a, b) for rank, (a, b, _) in _choices(events).items()}


def name_causes(events: Iterable[Mapping[str, Any]]) -> dict[int, list[Cause]]:
    """Per rank with a complete census pair, its causes (an empty list: a census found nothing growing); where the
    census named nothing, the lines a tracemalloc window saw grow (``pymem`` events, python_growth.py)."""
    events = list(events)
    named = {rank: found for rank, (_, _, found) in _choices(events).items()}
    for rank, found in python_causes(events).items():
        if found and not named.get(rank):
            named[rank] = found
    return named


def read_census_events(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return [e for e in EventReader(Path(run_dir)).each() if e.get("type") == "census"]
