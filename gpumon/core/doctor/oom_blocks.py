"""What held the GPU at a CUDA out-of-memory: the allocator's snapshot a rank kept at the failure (``oom_snapshot``,
telemetry/cuda_history.py), as the doctor's OOM answer shows it beside its fixes.

Sizes print as PyTorch prints them (``fmt_size``), as the rest of the OOM answer does, from the event's bytes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpumon.core.doctor.advice_text import item
from gpumon.core.doctor.advice_types import Scored
from gpumon.core.doctor.allocator_warnings import findings
from gpumon.core.doctor.failures import Failure
from gpumon.core.doctor.oom import fmt_size

STACKS_ENV = "GPUMON_OOM_STACKS"  # telemetry/cuda_history.py's switch (core never imports telemetry)
VIEW = "python -m torch.cuda._memory_viz trace_plot {path} -o {html}"  # torch 2.13's argparse; also stats, segments


def attach(failure: Failure, allocator: Any, run_dir: Path) -> Failure:
    """A CUDA OOM with the snapshot its rank kept (the failing rank's, else the first) and the allocator's warnings
    before it (``warned``); as it was otherwise."""
    if failure.kind != "cuda_oom":
        return failure
    oom, warned = allocator.oom_of(failure.rank), [text for _, text, _ in findings(allocator)]
    if oom is None and not warned:
        return failure
    kept = (oom or {}).get("snapshot")
    path = str(run_dir / kept) if isinstance(kept, str) and kept else None
    view = view_command(path) if path else None
    read = f"gpumon doctor {run_dir.name} --snapshot {os.path.basename(path)}" if path else None  # gpumon's own
    return replace(failure, snapshot={**(oom or {}), "path": path, "read": read, "view": view, "warned": warned})


def view_command(path: str) -> str:
    return VIEW.format(path=path, html=os.path.splitext(os.path.basename(path))[0] + ".html")


def where(block: dict[str, Any]) -> str:
    return f"{block['file']}:{block['line']}" if block.get("file") else "(no stack)"


def blocks_text(snapshot: dict[str, Any]) -> str:
    """ "2.00 GiB train.py:41, 1024.00 MiB model.py:12"."""
    return ", ".join(f"{fmt_size(int(b.get('size') or 0))} {where(b)}" for b in _blocks(snapshot))


def oom_lines(snapshot: dict[str, Any] | None) -> list[str]:
    """The OOM answer's lines on the snapshot: the largest blocks, each one's stack, where it was kept."""
    if not snapshot:
        return []
    blocks = _blocks(snapshot)
    rank, dev = snapshot.get("rank"), snapshot.get("dev")
    lines = [f"before the OOM: {text}" for text in snapshot.get("warned") or ()]
    if blocks:
        lines.append(f"largest blocks at the OOM (rank {rank}, {dev}): {blocks_text(snapshot)}")
    lines += [f"  {fmt_size(int(b.get('size') or 0))}: " + " < ".join(b["stack"]) for b in blocks[:3] if b.get("stack")]
    if blocks and not any(b.get("file") for b in blocks):
        lines.append(f"  no stacks: the allocator recorded none; launch with --env {STACKS_ENV}=1 for the next OOM's")
    if snapshot.get("path"):
        lines.append(f"snapshot kept: {snapshot['path']}; read it: {snapshot['read']} (or gpumon serve's page, or "
                     f"{snapshot['view']})")  # fmt: skip
    return lines


def blocks_advice(f: Failure) -> Scored:
    """Look at what held the memory: the largest blocks with their lines, and the snapshot to open."""
    snapshot = f.snapshot
    blocks = _blocks(snapshot) if snapshot else []
    if not snapshot or not blocks:
        return []
    top = blocks[0]
    why = f"largest blocks at the OOM: {blocks_text(snapshot)}"
    if snapshot.get("view"):
        look = f"read the snapshot kept at the failure: {snapshot['read']} (or {snapshot['view']})"
    else:
        look = "the snapshot was too big to keep"
    if not top.get("file"):
        look += f"; launch with --env {STACKS_ENV}=1 so the next OOM names each block's line"
    return [item(78, "oom_blocks", why, size=fmt_size(int(top.get("size") or 0)), where=where(top), look=look)]


def _blocks(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in snapshot.get("largest") or () if isinstance(b, dict)]
