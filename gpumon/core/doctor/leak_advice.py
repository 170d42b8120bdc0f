"""Fixes for memory that grows per iteration, ranked, whether or not a census named the cause.

A cause the census named ranks first and says so. Without one (census off, the run ended too soon, a
leak between censuses) the usual suspects are ranked by what is known: a host-memory leak on a CUDA
rank is nearly always an autograd graph kept alive (a loss summed as a tensor); GPU memory that grows
is nearly always tensors kept on the device (outputs in a list, a cache). Each says how to confirm it.
A census that came back naming nothing rules those out: the advice then says what it saw and where
else to look (and, under torch.distributed, the Flight Recorder's ring of recent collectives).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


NOT_TENSORS = (
    "look outside torch's tensors: Python objects kept each step (a list or dict that gains entries, "
    "a cache), a C extension, or the allocator's free lists. tracemalloc finds Python's: "
    "`tracemalloc.start()`, then compare two `tracemalloc.take_snapshot()`s a few hundred steps apart"
)
NOT_PYTHON = (
    "look below Python: a C extension's own allocations, memory torch keeps outside tensors, or glibc's arenas "
    "holding freed memory (try `MALLOC_ARENA_MAX=2`, or `MALLOC_TRIM_THRESHOLD_`)"
)
FLIGHT_RECORDER = (
    "nothing to fix if the growth stops: torch.distributed's Flight Recorder keeps a record of each of the "
    "last TORCH_FR_BUFFER_SIZE collectives (default 2,000), with its stack, and stops growing once full. "
    "Measured on gpumon's DDP trainer (gloo, CPU): +1.6 KiB a step, flat after ~800 steps, 3.7 MiB in all; "
    "with TORCH_FR_BUFFER_SIZE=0 (which turns the recorder off, and its dumps on a hang) it was flat"
)


def leak_advice(
    leaks: dict[int, LeakState],
    causes: tuple[Cause, ...],
    censused: tuple[int, int] | None = None,
    distributed: bool = False,
    run_id: str = "",
    window: Mapping[str, Any] | None = None,
) -> list[Advice]:
    """The causes a census named, then what else to look at for the worst growth among ``leaks``.

    ``censused``: the steps of the latest census pair; when it named nothing the tensor suspects are out.
    ``distributed``: the run uses torch.distributed (its collectives' Flight Recorder is then a suspect).
    ``run_id``: the run the advised command names.
    ``window``: the latest tracemalloc window (a ``pymem`` event); one that named no line rules Python's objects out.
    """
    named = [c for c in causes if c.kind in ADVICE]
    # What a census named is advice whether or not the memory trend warns yet.
    by = {"python_objects": "tracemalloc", "cuda_allocations": "PyTorch's memory history"}  # a window, not the census
    out = [Advice(f"leak_{c.kind}", f"{c.title} (named by {by.get(c.kind, 'the census')})", c.evidence, c.advice)
           for c in named]  # fmt: skip
    growing = [s for s in leaks.values() if s.grows]
    if not growing or named:  # a census names every tensor pattern that grows: the others are not it
        return out
    worst = max(growing, key=lambda s: (s.warning, s.state == "leak", s.slope))
    rate = f"+{size(worst.slope)} per iteration ({worst.memory or 'memory'}, {worst.state})"
    if censused:  # the census looked: no tensor or graph grew, so none of the tensor suspects is it
        saw = f"the tensor census at steps {censused[0]} and {censused[1]} saw no tensors or autograd graphs grow"
        looked = window is not None and not window.get("error") and not window.get("lines")
        if looked and window is not None:  # gpumon's own tracemalloc window looked, and no line of the script grew
            saw += f"; tracemalloc over steps {window.get('step')} to {window.get('to')} saw no line of the script grow"
        out.append(Advice("leak_not_tensors", "What grows is not torch's tensors", f"memory grows {rate}; {saw}",
                          NOT_PYTHON if looked else NOT_TENSORS))  # fmt: skip
        if distributed:
            why = f"memory grows {rate} in a torch.distributed run; {saw}"
            out.append(Advice("leak_flight_recorder", "Wait for the Flight Recorder to fill", why, FLIGHT_RECORDER))
        return out
    for kind in ORDER.get(worst.memory, ORDER[""]):
        title, likely = SUSPECTS[kind]
        why = f"memory grows {rate}; likely: {likely}; {CONFIRM.replace('RUN', run_id or 'RUN')}"
        out.append(Advice(f"leak_{kind}", title, why, ADVICE[kind]))
    return out
