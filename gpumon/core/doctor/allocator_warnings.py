"""The CUDA allocator's early warnings, before an out-of-memory (issue 52): its cudaMalloc retries rising, and
fragmentation (far more reserved than the step ever uses). The fold keeps each finding (reading/allocator.py);
here they become the words an alert, the Runs row and the doctor share, each with its fix.

Why ``torch.cuda.empty_cache()`` is not the fix for either: before each retry the allocator has already freed
every cached block it could, so emptying the cache by hand frees nothing the retry did not; and the blocks a
fragmented cache holds are split segments with live tensors in them, which empty_cache cannot return either. It
only makes the next steps ask cudaMalloc again, and each such call synchronises the GPU.
"""

from __future__ import annotations

from typing import Any

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.doctor.oom import fmt_size

KINDS = ("alloc_retries", "fragmentation")
HEADS = {"alloc_retries": "allocator retries rising", "fragmentation": "allocator fragmentation"}
EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (gpumon launch --env PYTORCH_CUDA_ALLOC_CONF=...)"
RETRY_WHY = (
    "the allocator already emptied its cache before each retry, so it frees nothing more and only makes every step "
    "call cudaMalloc (a GPU sync) again"
)
FRAGMENT_WHY = (
    "it returns only whole free segments, which the next steps reserve again, split the same way, each cudaMalloc a "
    "GPU sync"
)
FIXES = {
    "alloc_retries": (
        "Give the allocator room before it fails",
        f"{EXPANDABLE}, or a smaller batch; torch.cuda.empty_cache() is not the fix: {RETRY_WHY}",
    ),
    "fragmentation": (
        "Stop the cache from fragmenting: expandable segments",
        f"{EXPANDABLE}: segments grow in place, so freed pieces join instead of splitting the reserve; or a smaller "
        f"batch; torch.cuda.empty_cache() is not the fix: {FRAGMENT_WHY}",
    ),
}


def finding_text(kind: str, rank: int, found: dict[str, Any]) -> str:
    """ "allocator retries rising on rank 0: 3 cudaMalloc retries in the last minute (...)"."""
    head = f"{HEADS[kind]} on rank {rank}: "
    if kind == "alloc_retries":
        n = int(found.get("count") or 0)
        return (f"{head}{n} cudaMalloc retr{'y' if n == 1 else 'ies'} in the last minute (PyTorch freed its cache and "
                "retried: the next step may OOM)")  # fmt: skip
    reserved, peak, total = (int(found.get(k) or 0) for k in ("reserved", "peak", "total"))
    unused = reserved - peak
    return (f"{head}PyTorch reserves {fmt_size(reserved)} while the step's peak allocates {fmt_size(peak)}: "
            f"{fmt_size(unused)} ({unused / max(1, total):.0%} of the GPU's {fmt_size(total)}) is cached and unused, "
            "and a large tensor may not find it in one piece")  # fmt: skip


def findings(allocator: Any) -> list[tuple[str, str, str]]:
    """(kind, text, fix) of each warning the run's allocator gave, its first rank's."""
    out = []
    for kind in KINDS:
        first = allocator.first(kind)
        if first is not None:
            title, change = FIXES[kind]
            out.append((kind, finding_text(kind, first[0], first[1]), f"{title}: {change}"))
    return out


def said(kind: str, alerts: list[str]) -> bool:
    """The run's alerts already hold this kind's (an earlier supervisor of the run raised it)."""
    return any(text.startswith(HEADS[kind]) for text in alerts)


def allocator_advice(allocator: Any, failure: Any = None) -> list[Advice]:
    """The warnings' fixes; none for a CUDA OOM, whose own answer has them with the failure's numbers (the
    warnings join its evidence: oom_blocks.py)."""
    if failure is not None and failure.kind == "cuda_oom":
        return []
    return [Advice(kind, FIXES[kind][0], text, FIXES[kind][1]) for kind, text, _ in findings(allocator)]
