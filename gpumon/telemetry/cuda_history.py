"""GPU memory that grows without a tensor the census saw: PyTorch's memory history for the same bounded window.

CUDA only, and guarded: ``torch.cuda.memory._record_memory_history`` is private API. On a rank whose CUDA is
initialised, the tracemalloc window (pymem.py) also records every CUDA allocation with its Python stack
(``max_entries`` bounds the ring), takes ``torch.cuda.memory._snapshot()`` at both ends, and diffs the blocks
still allocated by the script's innermost frame: the top growing allocation stacks with file:line. The second
snapshot is kept with the run (``pymem/rank<N>.pickle``, at most ``KEEP_BYTES``), for PyTorch's memory_viz.

At an out-of-memory the allocator's snapshot is kept too (``watch_oom``). Its blocks carry their stacks only where
the history was recording when they were allocated: ``GPUMON_OOM_STACKS=1`` records the stacks of the live blocks
(``enabled="state"``, no trace ring) from the rank's first step, about 2 us per allocation by PyTorch's account.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from gpumon.core.safefs import write_atomic

MAX_ENTRIES = 20_000  # alloc/free records kept by the ring (a few KB each)
KEEP_BYTES = 64 * 1024 * 1024  # a snapshot bigger than this is not kept
TOP = 3
MIN_GROWTH = 1024 * 1024
STACKS_ENV = "GPUMON_OOM_STACKS"  # "1": the live blocks' stacks recorded from the first step, for an OOM's snapshot
STACK_FRAMES = 6  # frames kept per block in an oom_snapshot event


def start(torch: ModuleType) -> bool:
    """Record the allocator's history; False where there is none (no CUDA, an older torch)."""
    try:
        if not torch.cuda.is_initialized():
            return False
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=MAX_ENTRIES)  # fmt: skip
        return True
    except Exception:  # noqa: BLE001 - private API: absent or changed, the window goes on without it
        return False


def snapshot(torch: ModuleType) -> dict[str, Any] | None:
    try:
        return dict(torch.cuda.memory._snapshot())
    except Exception:  # noqa: BLE001
        return None


def stop(torch: ModuleType) -> None:
    """The window's recording off, back to the live blocks' stacks where ``GPUMON_OOM_STACKS`` asks for them."""
    try:
        if not _stacks(torch):
            torch.cuda.memory._record_memory_history(enabled=None)
    except Exception:  # noqa: BLE001
        return


def _stacks(torch: ModuleType) -> bool:
    """Record the stacks of live blocks only (no trace ring) where the user asked: True when it is on."""
    if os.environ.get(STACKS_ENV, "") in ("", "0"):
        return False
    torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python")
    return True


def grown(
    first: Mapping[str, Any], second: Mapping[str, Any], steps: int, user: Callable[[str], bool]
) -> list[dict[str, Any]]:
    """The script's lines whose live CUDA blocks grew from ``first`` to ``second``, biggest first."""
    before, after = _live(first, user), _live(second, user)
    lines: list[dict[str, Any]] = []
    for key, (size, count) in after.items():
        gained = size - before.get(key, (0, 0))[0]
        if gained >= MIN_GROWTH:
            path, line, function = key
            lines.append({"file": os.path.basename(path), "path": path, "line": line, "function": function,
                          "bytes": gained, "count": count - before.get(key, (0, 0))[1],
                          "per_step": gained // max(1, steps)})  # fmt: skip
    return sorted(lines, key=lambda found: int(found["bytes"]), reverse=True)[:TOP]


def _live(snap: Mapping[str, Any], user: Callable[[str], bool]) -> dict[tuple[str, int, str], tuple[int, int]]:
    """Bytes and blocks allocated now, by the script's innermost frame of the stack that allocated each."""
    out: dict[tuple[str, int, str], tuple[int, int]] = {}
    for segment in snap.get("segments") or ():
        for block in segment.get("blocks") or ():
            if block.get("state") != "active_allocated":
                continue
            frame = next((f for f in block.get("frames") or () if user(str(f.get("filename", "")))), None)
            if frame is None:
                continue
            key = (str(frame["filename"]), int(frame.get("line") or 0), str(frame.get("name") or ""))
            size, count = out.get(key, (0, 0))
            out[key] = (size + int(block.get("size") or 0), count + 1)
    return out


def keep(snap: Mapping[str, Any], run_dir: str, rank: int, name: str = "rank") -> str | None:
    """Save the snapshot with the run for memory_viz (bounded); its path relative to the run, or None."""
    data = pickle.dumps(dict(snap))
    if len(data) > KEEP_BYTES:
        return None
    relative = os.path.join("pymem", f"{name}{rank}.pickle")
    try:
        os.makedirs(os.path.join(run_dir, "pymem"), mode=0o700, exist_ok=True)
        write_atomic(Path(run_dir, relative), data)  # never through a link planted there
    except OSError:
        return None
    return relative


def watch_oom(torch: ModuleType, run_dir: str, rank: Callable[[], int], write: Callable[..., None]) -> bool:
    """At a CUDA out-of-memory, before the error is raised: the allocator's snapshot kept with the run
    (``pymem/oom<N>.pickle``) and an ``oom_snapshot`` event with its largest blocks. Once a process (the observer
    may be called several times for one OOM). False where the private hook is missing."""
    taken: list[bool] = []

    def observer(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        if taken:
            return
        taken.append(True)
        try:
            snap = snapshot(torch)
            if snap is None:
                return
            kept = keep(snap, run_dir, rank(), name="oom")
            from gpumon.telemetry.pymem_holder import _script  # the script's own files (not torch's, not gpumon's)

            write("oom_snapshot", dev=f"cuda:{device}", tried=int(alloc), free=int(device_free), snapshot=kept,
                  largest=largest(snap, user=_script))  # fmt: skip
        except Exception:  # noqa: BLE001 - the OOM itself is what the script will see
            return

    try:
        torch._C._cuda_attach_out_of_memory_observer(observer)
    except Exception:  # noqa: BLE001 - private API
        return False
    with contextlib.suppress(Exception):  # private API: the snapshot comes without stacks
        _stacks(torch)
    return True


def largest(snap: Mapping[str, Any], top: int = 5, user: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """The biggest blocks allocated, each with where it was allocated when history was recording: ``file`` and
    ``line`` of the script's innermost frame (``user``; else the innermost frame), and the ``stack``, innermost
    first ("linear.py:125 (forward)")."""
    blocks = [b for seg in snap.get("segments") or () for b in seg.get("blocks") or ()
              if b.get("state") == "active_allocated"]  # fmt: skip
    out = []
    for block in sorted(blocks, key=lambda b: int(b.get("size") or 0), reverse=True)[:top]:
        frames = [f for f in block.get("frames") or () if isinstance(f, Mapping)]
        frame = next((f for f in frames if user is None or user(str(f.get("filename", "")))), None)
        frame = frame or next(iter(frames), None)
        where: dict[str, Any] = {}
        if frame is not None:
            where = {"file": os.path.basename(str(frame.get("filename"))), "line": frame.get("line"),
                     "stack": [_frame(f) for f in frames[:STACK_FRAMES]]}  # fmt: skip
        out.append({"size": int(block.get("size") or 0), **where})
    return out


def _frame(frame: Mapping[str, Any]) -> str:
    name = str(frame.get("name") or "")
    at = f"{os.path.basename(str(frame.get('filename')))}:{frame.get('line')}"
    return f"{at} ({name})" if name and name != "<module>" else at
