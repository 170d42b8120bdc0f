"""Fixes for memory that grows per iteration, ranked, whether or not a census named the cause.

A cause the census named ranks first and says so. Without one (census off, the run ended too soon, a
leak between censuses) the usual suspects are ranked by what is known: a host-memory leak on a CUDA
rank is nearly always an autograd graph kept alive (a loss summed as a tensor); GPU memory that grows
is nearly always tensors kept on the device (outputs in a list, a cache). Each says how to confirm it.
"""

from __future__ import annotations

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.doctor.causes import ADVICE, Cause
from gpumon.core.doctor.leak import LeakState
from gpumon.core.format import size

CONFIRM = "to confirm on a live run: gpumon doctor RUN --census (two censuses name what grows)"

SUSPECTS: dict[str, tuple[str, str]] = {  # kind -> (title, why it is likely)
    "loss_graph": ("Accumulate the loss as a number", "`total_loss += loss` keeps every step's autograd graph"),
    "eval_no_grad": ("Evaluate under torch.no_grad()", "evaluation with grad keeps each batch's activations"),
    "outputs_list": ("Do not keep outputs on the device", "a list of outputs or logits grows by one per step"),
    "growing_tensors": ("Look for a growing cache", "a dict or list that gains tensors every step"),
}
ORDER = {  # which suspects first, by the memory that grows
    "host": ("loss_graph", "eval_no_grad", "outputs_list", "growing_tensors"),
    "gpu": ("outputs_list", "eval_no_grad", "loss_graph", "growing_tensors"),
    "": ("loss_graph", "outputs_list", "eval_no_grad", "growing_tensors"),
}


def leak_advice(
    leaks: dict[int, LeakState], causes: tuple[Cause, ...], censused: tuple[int, int] | None = None
) -> list[Advice]:
    """The causes a census named, then ranked suspects for the worst warning among ``leaks``."""
    named = [c for c in causes if c.kind in ADVICE]
    # What a census named is advice whether or not the memory trend warns yet.
    out = [Advice(f"leak_{c.kind}", f"{c.title} (named by the census)", c.evidence, c.advice) for c in named]
    warning = [s for s in leaks.values() if s.warning]
    if not warning or named:  # a census names every tensor pattern that grows: the others are not it
        return out
    worst = max(warning, key=lambda s: (s.state == "leak", s.slope))
    rate = f"+{size(worst.slope)} per iteration ({worst.memory or 'memory'}, {worst.state})"
    seen = {c.kind for c in named}
    for kind in ORDER.get(worst.memory, ORDER[""]):
        if kind in seen:
            continue
        title, likely = SUSPECTS[kind]
        confirm = f"a census at steps {censused[0]}-{censused[1]} saw no tensors grow" if censused else CONFIRM
        why = f"memory grows {rate}; likely: {likely}; {confirm}"
        out.append(Advice(f"leak_{kind}", title, why, ADVICE[kind]))
    return out
