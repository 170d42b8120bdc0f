"""Advice for out-of-memory failures: the GPU's, from the allocator's numbers, and the host's."""

from __future__ import annotations

import math
import re

from gpumon.core.doctor.advice_text import item
from gpumon.core.doctor.advice_types import Context, Scored
from gpumon.core.doctor.failures import Failure
from gpumon.core.doctor.oom import MemoryNumbers, fmt_size
from gpumon.core.doctor.oom_blocks import blocks_advice

GiB = 1024**3
_S = fmt_size
_EVAL_FRAME = re.compile(r", in ((?:\w+_)?(?:eval|valid|test|predict|infer|generate)\w*)\b", re.I)


def fitting_batch(batch: int, m: MemoryNumbers, fixed: int = 0) -> int | None:
    """A batch size that should fit, scaled from the OOM's numbers; None when size does not explain the OOM.

    The step needed at least ``allocated + requested``; PyTorch could have had ``reserved + free`` (capped by
    the allowed fraction). What scales with the batch is the need minus ``fixed`` (weights, gradients,
    optimizer state, when known; 0 scales everything, which is optimistic). 10% headroom, then down to a
    multiple of 8, or a power of two below 16. 0 means even one sample does not fit.
    """
    if m.allocated is None or m.requested is None or m.capacity is None:
        return None
    need, room = m.allocated + m.requested, m.capacity
    if need <= room:  # it would have fitted in one piece: fragmentation or a neighbour, not the batch size
        return None
    estimate = batch * (0.9 * room - fixed) / max(1, need - fixed)
    if estimate < 1:
        return 0
    return int(estimate) // 8 * 8 if estimate >= 16 else 2 ** int(math.log2(estimate))


def _summary(m: MemoryNumbers) -> str:
    """The message's numbers in one clause, as PyTorch printed them."""
    parts = [f"asked for {_S(m.requested)}" if m.requested is not None else ""]
    if m.allocated is not None:
        parts.append(f"PyTorch held {_S(m.allocated)} allocated + {_S(m.reserved_unallocated or 0)} cached")
    if m.free is not None and m.total:
        parts.append(f"{_S(m.free)} free of {_S(m.total)}" + (f" on GPU {m.gpu}" if m.gpu is not None else ""))
    return "; ".join(p for p in parts if p)


def cuda_oom(f: Failure, ctx: Context) -> Scored:
    m = f.memory
    if m is None:  # "CUDA error: out of memory", cuBLAS/cuDNN workspaces: no numbers, only the line
        line = f.evidence[-1] if f.evidence else f.title
        change = "halve --batch-size and retry: PyTorch's cache can fill the GPU and starve cuBLAS/cuDNN/NCCL"
        return [
            item(90, "gpu_occupied", f"no GPU memory was left for: {line}"),
            item(70, "batch_size", f"the failing call: {line}", size="half its value", change=change),
        ]
    seen = _summary(m)
    out: Scored = []
    if m.allowed and m.total and m.allowed < 0.95 * m.total:
        out.append(item(100, "memory_fraction", f"this process may use only {_S(m.allowed)} of {_S(m.total)} ({seen})"))
    if others := sum(size for _, size in m.others):
        who = ", ".join(f"pid {pid} holds {_S(size)}" for pid, size in m.others)
        out.append(item(90 if others >= (m.requested or 0) else 45, "other_processes", f"{who} of the GPU ({seen})"))
    elif m.outside is not None and m.total and m.outside > max(GiB, 0.1 * m.total) and m.process_in_use is None:
        why = f"{_S(m.outside)} of the GPU's {_S(m.total)} was neither free nor PyTorch's ({seen})"
        out.append(item(85 if m.outside >= 2 * (m.requested or 0) else 60, "outside_memory", why))
    if m.process_in_use is not None and m.reserved is not None and m.total:
        extra = m.process_in_use - m.reserved
        if extra > max(GiB, 0.05 * m.total):
            why = (
                f"the process used {_S(m.process_in_use)}, PyTorch reserved {_S(m.reserved)}: {_S(extra)} is elsewhere"
            )
            out.append(item(30, "non_pytorch", why))
    out += _fragmentation(m, seen)
    return out + blocks_advice(f) + _shrink(f, m, ctx, seen)


def _fragmentation(m: MemoryNumbers, seen: str) -> Scored:
    """expandable_segments when the unused reserve is large or could have held the request; empty_cache only
    when that reserve is far beyond what is allocated."""
    cached, asked = m.reserved_unallocated or 0, m.requested or 0
    huge = bool((m.total and cached > 0.25 * m.total) or (m.allocated is not None and cached > m.allocated))
    if cached < 64 * 1024**2 or not (cached >= asked or huge):
        return []
    why = f"{_S(cached)} was reserved by PyTorch but unallocated, yet {_S(asked)} was not there in one piece ({seen})"
    out = [item(85 if cached >= asked else 60, "expandable_segments", why)]
    if huge:
        above = m.allocated is not None and cached > m.allocated
        share = "more than the memory in use" if above else "over a quarter of the GPU"
        why = f"the unused reserve, {_S(cached)}, is {share} ({_S(m.allocated or 0)} allocated of {_S(m.total or 0)})"
        out.append(item(55, "empty_cache", why))
    return out


def _shrink(f: Failure, m: MemoryNumbers, ctx: Context, seen: str) -> Scored:
    """What lowers a step's need: leak fixes, no_grad, a smaller batch, bf16, checkpointing, accumulation."""
    out: Scored = []
    grew = ctx.growth(ctx.allocated)
    if ctx.leak_slope or grew:
        rate = f"+{_S(ctx.leak_slope)} per step" if ctx.leak_slope else ""
        if grew:
            rate = f"from {_S(grew[0])} to {_S(grew[1])} over {grew[2]} steps" + (f" ({rate})" if rate else "")
        out.append(item(95, "item", f"allocated memory grew {rate}; at the failure {seen}"))
    else:
        out.append(item(15, "item", seen))
    frame = _EVAL_FRAME.search(f.text)
    where = f": the OOM was in {frame.group(1)}()" if frame else ""
    out.append(item(75 if frame else 12, "no_grad", seen, where=where))
    new = fitting_batch(ctx.batch_size, m) if ctx.batch_size else None
    scale = fitting_batch(1000, m)  # per mille of the current batch, when the batch size is unknown
    need = f"the step needed at least {_S((m.allocated or 0) + (m.requested or 0))}"
    if ctx.batch_size and new:
        why = (f"{need} and PyTorch could have had {_S(m.capacity or 0)}; --batch-size {ctx.batch_size} scaled by "
               f"that with 10% headroom gives {new}, an estimate: weights and optimizer state do not shrink, so "
               "halve again if it still fails")  # fmt: skip
        out.append(item(80, "batch_size", why, size=f"{new} (estimate)", change=f"--batch-size {new}"))
        steps = math.ceil(ctx.batch_size / new)
        why = f"{new} x {steps} = {new * steps} >= {ctx.batch_size} samples per optimizer step ({seen})"
        out.append(item(40, "grad_accum", why, steps=steps))
    elif scale == 0 or new == 0:
        out.append(item(70, "model_too_big", f"{need}, PyTorch could have had {_S(m.capacity or 0)}"))
    elif scale:
        why = f"{need}, PyTorch could have had {_S(m.capacity or 0)} (an estimate, with 10% headroom)"
        size = f"about {scale / 10:.0f}% of the current one"
        out.append(item(70, "batch_size", why, size=size, change="lower --batch-size, to a multiple of 8"))
    elif m.free is not None and m.total and m.free < 0.02 * m.total:  # fits once defragmented, but only just
        why = f"{need} and fits in PyTorch's reserve, but the GPU was full: {_S(m.free)} free of {_S(m.total)}"
        out.append(item(50, "batch_size", why, size="leave headroom", change="lower --batch-size by a quarter"))
    tight = 65 if scale is not None else 35  # the batch no longer fits: activations must shrink
    if not ctx.amp:
        out.append(item(tight, "mixed_precision", seen))
    if not ctx.checkpointing:
        out.append(item(tight - 10, "checkpointing", seen))
    return out


def host_oom(f: Failure, ctx: Context) -> Scored:
    line = f.evidence[-1] if f.evidence else f.title
    out: Scored = []
    if "shared memory" in f.title.lower():
        out.append(item(95, "shm", f"the failure reads: {line}"))
    if f.signal == "SIGKILL":
        out.append(item(100, "confirm_oom_killer", f"SIGKILL leaves no traceback; the evidence is: {line}"))
    requested = f.memory.requested if f.memory else None
    if requested is not None and requested > 256 * GiB:
        out.append(item(90, "tensor_size", f"one allocation asked for {_S(requested)}", size=_S(requested)))
    if ctx.held:  # named before the crash: the strongest evidence there is
        out.append(item(110, "census_holder", f"the last census named: {ctx.held}; then: {line}", fix=ctx.held_fix))
    if ctx.ceiling:
        why = f"the rank ran under {ctx.ceiling}, below the host's memory; then: {line}"
        out.append(item(92, "memory_limit", why, how=LIMIT_FIX.get(ctx.ceiling_source, LIMIT_FIX["cgroup"])))
    if grew := ctx.growth(ctx.rss):
        why = f"RSS grew from {_S(grew[0])} to {_S(grew[1])} over {grew[2]} steps; then: {line}"
        out.append(item(95, "host_leak", why))
    out += _workers(f, ctx, line)
    if ctx.pin_memory:
        out.append(item(45, "pin_memory", f"pin_memory=True page-locks every batch in host RAM; {line}"))
    asked = f"the allocation was {_S(requested)}" if requested is not None else line
    out.append(item(40 if requested is None else 70, "host_batch", asked))
    return out


LIMIT_FIX = {
    "as": "raise the address-space limit (ulimit -v, prlimit --as, resource.setrlimit(RLIMIT_AS)) or remove it: it "
    "counts virtual memory, which torch reserves freely; or hold less per step",
    "data": "raise the data-segment limit (ulimit -d, prlimit --data) or hold less per step",
    "cgroup": "raise the container's or job's memory limit (docker run --memory, Slurm --mem, systemd MemoryMax) "
    "or hold less per step",
}


def _workers(f: Failure, ctx: Context, line: str) -> Scored:
    """Fewer DataLoader workers: only where the run has or may have them, conditionally when unknown."""
    if ctx.num_workers == 0:
        return []
    named = "DataLoader" in f.text or bool(ctx.num_workers)
    if not named and ctx.workers is False:
        return []  # no process beside the ranks was ever seen, nor any DataLoader named: it has none
    workers = f" (num_workers={ctx.num_workers})" if ctx.num_workers else ""
    why = f"DataLoader workers{workers} are processes, each with a copy-on-write view of the dataset; {line}"
    if named or ctx.workers:
        return [item(85 if named else 50, "dataloader_workers", why, when="U")]
    return [item(30, "dataloader_workers", "gpumon could not tell whether it had any; " + why, when="If the run "
                 "uses DataLoader workers: u")]  # fmt: skip
