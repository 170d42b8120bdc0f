"""Which line of the script allocates the Python memory that grows: a bounded tracemalloc window, on request.

When memory grows and the tensor census saw no tensor grow, the supervisor writes ``control/pymem`` (its
content: the window's steps and the ranks asked, ``request_pymem``). A rank asked turns on ``tracemalloc``
with ``FRAMES`` frames at a step boundary, snapshots at the next step, and again ``steps`` steps later or
after ``WINDOW_S``, whichever comes first. The second snapshot compared with the first, by traceback, gives
what grew; each growth is put on the script's own frame (not the standard library's, a package's or
gpumon's). Then tracemalloc stops, and a ``pymem`` event says the lines, how much each grew, and who holds
what they allocated (a dict or a list and its name, found as the census finds a tensor's holder).

Bounded: tracemalloc slows the script's Python allocations only inside the window; a timer stops it after
``MAX_ON_S`` even if no step comes (a stalled rank); one window a request, from requests newer than the
process. A file, not a signal, as for the census (census.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpumon.core.protocol import CONTROL_DIR, PYMEM_FLAG, PYMEM_STEPS
from gpumon.core.runs.reading.cuda_snapshot import script_file
from gpumon.telemetry import cuda_history
from gpumon.telemetry.pymem_holder import find_holder
from gpumon.telemetry.request_file import RequestFile

FRAMES = 8  # frames kept per allocation: enough to reach the script's line from inside a library
WINDOW_S = 20.0  # the second snapshot at most this long after the first (at the next step boundary)
MAX_ON_S = 60.0  # tracemalloc off after this long whatever happens
TOP = 3  # lines in the event
MIN_GROWTH = 64 * 1024  # bytes a line must have gained in the window to be named
HOLDER_S = 1.0  # the holder search's time budget, over all lines
MIN_ITEMS = 8  # a container with fewer items is not a growing cache
_GPUMON = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class PyMemTrigger:
    """Owned by the step hook: ``at_step`` costs one comparison per step while idle."""

    def __init__(self, run_dir: str, since_ns: int, rank: Callable[[], int], torch: ModuleType | None = None) -> None:
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, CONTROL_DIR, PYMEM_FLAG)
        self.rank = rank
        self.torch = torch  # on a CUDA rank the window records the allocator's history too (cuda_history.py)
        self.requests = RequestFile(self.path, since_ns)  # requests older than this process are not ours
        self.window: dict[str, Any] | None = None  # the window open: request, steps, start step and time
        self.timer: threading.Timer | None = None

    def at_step(self, step: int, now: float, write: Callable[..., None]) -> None:
        if self.window is not None:
            self._go_on(step, write)
            return
        request = self.requests.new(now)
        if request is None:
            return
        steps, ranks = _read(self.path)
        if ranks and self.rank() not in ranks:
            return
        mine = tracemalloc.is_tracing()  # the script traces already: use its tracing, never stop it
        if not mine:
            tracemalloc.start(FRAMES)
            self.timer = threading.Timer(MAX_ON_S, _stop)
            self.timer.daemon = True
            self.timer.start()
        cuda = self.torch is not None and cuda_history.start(self.torch)
        self.window = {"window": request, "steps": steps, "on": step, "own": not mine, "first": None, "cuda": cuda}

    def _go_on(self, step: int, write: Callable[..., None]) -> None:
        w = self.window
        assert w is not None
        if not tracemalloc.is_tracing():  # the timer stopped it: no step came in time
            self._close()
            write("pymem", window=w["window"], step=w["on"], error=f"no step within {MAX_ON_S:.0f} s: tracing stopped")
            return
        if w["first"] is None:  # one step after tracing began: what the step itself allocates is made once
            started = time.perf_counter()
            w["first"] = _snapshot()
            w["cuda_first"] = cuda_history.snapshot(self.torch) if w["cuda"] and self.torch is not None else None
            w["step"], w["t"], w["ms"] = step, time.monotonic(), (time.perf_counter() - started) * 1e3
            return
        if step - w["step"] < w["steps"] and time.monotonic() - w["t"] < WINDOW_S:
            return
        started = time.perf_counter()
        try:
            fields = grown(w["first"], _snapshot(), step - w["step"])
            if w.get("cuda_first") is not None and self.torch is not None:
                fields.update(self._cuda(w["cuda_first"], step - w["step"]))
        except Exception as err:  # noqa: BLE001 - a window must never break training
            fields = {"error": f"{type(err).__name__}: {err}"}
        w["first"] = None
        self._close()
        took = w["ms"] + (time.perf_counter() - started) * 1e3
        write("pymem", window=w["window"], step=w["step"], to=step, seconds=round(time.monotonic() - w["t"], 2),
              frames=FRAMES, ms=round(took, 1), **fields)  # fmt: skip

    def _cuda(self, first: dict[str, Any], steps: int) -> dict[str, Any]:
        """The GPU side of the window: the growing allocation stacks, and the snapshot kept with the run."""
        second = cuda_history.snapshot(self.torch) if self.torch is not None else None
        if second is None:
            return {}
        kept = cuda_history.keep(second, self.run_dir, self.rank())
        return {"cuda_lines": cuda_history.grown(first, second, steps, script_file), "cuda_snapshot": kept}

    def _close(self) -> None:
        if self.window is not None and self.window.get("cuda") and self.torch is not None:
            cuda_history.stop(self.torch)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.window is not None and self.window["own"]:
            tracemalloc.stop()
        self.window = None


def _stop() -> None:
    tracemalloc.stop()


def _snapshot() -> tracemalloc.Snapshot:
    # Our own allocations (this module's, the event writer's, the step hook's) are not the script's.
    return tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, _GPUMON + "*"))
    )


def grown(first: tracemalloc.Snapshot, second: tracemalloc.Snapshot, steps: int) -> dict[str, Any]:
    """The script's lines whose allocations grew from ``first`` to ``second``, biggest first, with holders."""
    by_line: dict[tuple[str, int], dict[str, Any]] = {}
    for stat in second.compare_to(first, "traceback"):
        if stat.size_diff <= 0:
            continue
        frames = _users(stat.traceback)
        if not frames:
            continue
        # Grouped by the script's innermost line; its caller in the script said too (``decoded[i] = decode(i)``).
        via = f"{os.path.basename(frames[1].filename)}:{frames[1].lineno}" if len(frames) > 1 else ""
        line = by_line.setdefault((frames[0].filename, frames[0].lineno), {"bytes": 0, "count": 0, "via": via})
        line["bytes"] += stat.size_diff
        line["count"] += stat.count_diff
    top = sorted(by_line.items(), key=lambda item: item[1]["bytes"], reverse=True)[:TOP]
    lines = []
    for (path, lineno), found in top:
        if found["bytes"] < MIN_GROWTH:
            break
        lines.append({"file": os.path.basename(path), "path": path, "line": lineno, "function": _function(path, lineno),
                      "bytes": found["bytes"], "count": found["count"], "per_step": found["bytes"] // max(1, steps),
                      **({"via": found["via"]} if found["via"] else {})})  # fmt: skip
    deadline = time.perf_counter() + HOLDER_S
    for line in lines:
        holder = find_holder(line["path"], line["line"], deadline)
        if holder:
            line["holder"] = holder
    return {"lines": lines, "traced": tracemalloc.get_traced_memory()[0]}


def _users(traceback: tracemalloc.Traceback) -> list[tracemalloc.Frame]:
    """The script's own frames, most recent first (the allocation's own line, or the call that led to it)."""
    return [frame for frame in reversed(traceback) if script_file(frame.filename)]  # oldest first since 3.7


def _function(path: str, lineno: int) -> str:
    """The function of the module that holds the line ("<module>" if none does)."""
    best = ("", -1)
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) != path:  # co_filename: the path the module was loaded by
            continue
        for value in list(vars(module).values()):
            code = getattr(value, "__code__", None)
            if code is None or code.co_filename != path or not best[1] < code.co_firstlineno <= lineno:
                continue
            if lineno <= max((line for _, _, line in code.co_lines() if line is not None), default=0):
                best = (code.co_name, code.co_firstlineno)
    return best[0] or "<module>"


def _read(path: str) -> tuple[int, set[int]]:
    """The window's steps and the ranks asked (none: every rank)."""
    try:
        with open(path) as fh:
            words = fh.read(256).split()
    except OSError:
        return PYMEM_STEPS, set()
    try:
        steps = min(10_000, max(1, int(words[0]))) if words else PYMEM_STEPS
        return steps, {int(w) for w in words[1:]}
    except ValueError:
        return PYMEM_STEPS, set()
