"""GPU memory that grows without a tensor the census saw: PyTorch's memory history for the same bounded window.

CUDA only, and guarded: ``torch.cuda.memory._record_memory_history`` is private API. On a rank whose CUDA is
initialised, the tracemalloc window (pymem.py) also records every CUDA allocation with its Python stack
(``max_entries`` bounds the ring), takes ``torch.cuda.memory._snapshot()`` at both ends, and diffs the blocks
still allocated by the script's innermost frame: the top growing allocation stacks with file:line. The second
snapshot is kept with the run (``pymem/rank<N>.pickle``, at most ``KEEP_BYTES``): ``gpumon doctor RUN --snapshot``
and serve's page read it (core/runs/reading/cuda_snapshot.py), as PyTorch's memory_viz does.

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

from gpumon.core.runs.reading.cuda_snapshot import MAX_BYTES, largest, live_by_line, script_file
from gpumon.core.safefs import write_atomic

MAX_ENTRIES = 20_000  # alloc/free records kept by the ring (a few KB each)
KEEP_BYTES = MAX_BYTES  # a snapshot bigger than this is not kept (nor read back)
TOP = 3
MIN_GROWTH = 1024 * 1024
STACKS_ENV = "GPUMON_OOM_STACKS"  # "1": the live blocks' stacks recorded from the first step, for an OOM's snapshot


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
    before, after = live_by_line(first, user), live_by_line(second, user)
    lines: list[dict[str, Any]] = []
    for key, (size, count) in after.items():
        gained = size - before.get(key, (0, 0))[0]
        if gained >= MIN_GROWTH:
            path, line, function = key
            lines.append({"file": os.path.basename(path), "path": path, "line": line, "function": function,
                          "bytes": gained, "count": count - before.get(key, (0, 0))[1],
                          "per_step": gained // max(1, steps)})  # fmt: skip
    return sorted(lines, key=lambda found: int(found["bytes"]), reverse=True)[:TOP]


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
            write("oom_snapshot", dev=f"cuda:{device}", tried=int(alloc), free=int(device_free), snapshot=kept,
                  largest=largest(snap, user=script_file))  # fmt: skip
        except Exception:  # noqa: BLE001 - the OOM itself is what the script will see
            return

    try:
        torch._C._cuda_attach_out_of_memory_observer(observer)
    except Exception:  # noqa: BLE001 - private API
        return False
    with contextlib.suppress(Exception):  # private API: the snapshot comes without stacks
        _stacks(torch)
    return True
