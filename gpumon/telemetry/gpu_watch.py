"""What the GPU did between steps, read without a host-device sync (CUDA only; a CPU run never builds these).

``CatchUp``: a CUDA event recorded on the current stream at each step's end, and asked (``query()``, which
never waits) at the next step's end. When the host has queued a whole step and the GPU has already finished
the one before, the GPU ran dry: it waited for the host (launch- or host-bound, or a sync in the step that
made the host wait for it). The step event carries the share of steps that found it so (``gpu_dry``).

``SyncCount``: around one counted step (flops.py's window), ``torch.cuda.set_sync_debug_mode("warn")``
makes every synchronising op warn (``.item()``, ``.cpu()``, ``print(tensor)``, ``nonzero``); the warnings,
caught, give how many there are and where: the innermost frame of the user's own code (``user_site``). The
warning's own file:line is where Python was when the C++ op warned: torch's frame for ``print(loss)``
(torch/_tensor_str.py) or a library's (the HF Trainer's) for a sync it makes, never the line to change.
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import warnings
from collections import Counter
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import Any

SYNC_WORDS = "synchronizing"  # torch's warning: "called a synchronizing CUDA operation"


class CatchUp:
    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.events: list[Any] = []  # two events, recorded in turn
        self.turn = 0
        self.dry = 0
        self.asked = 0

    def tick(self) -> None:
        """At a step's end: was the previous step's end already done on the GPU? Then mark this one."""
        cuda = self.torch.cuda
        if not self.events:
            self.events = [cuda.Event(), cuda.Event()]  # no timing: the cheapest event
            self.events[0].record()
            return
        previous, current = self.events[self.turn], self.events[1 - self.turn]
        self.asked += 1
        self.dry += bool(previous.query())  # never waits
        current.record()
        self.turn = 1 - self.turn

    def take(self) -> float | None:
        """The share of steps since the last call that found the GPU done with the previous one."""
        if not self.asked:
            return None
        share, self.dry, self.asked = self.dry / self.asked, 0, 0
        return round(share, 3)


class SyncCount:
    """Counts the synchronising ops of one step: ``enter()`` after a step, ``leave()`` after the next."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.catcher: Any = None
        self.sites: Counter[str] = Counter()
        self.previous_mode = 0
        self.shown: Any = None  # the showwarning in place before ours: other warnings go on to it

    def enter(self) -> None:
        cuda = self.torch.cuda
        try:
            self.previous_mode = int(cuda.get_sync_debug_mode())
            self.catch()
            cuda.set_sync_debug_mode("warn")
        except Exception:  # noqa: BLE001 - a torch without it: no count
            self.leave()

    def catch(self) -> None:
        """Catch torch's sync warnings from here to ``leave()`` (the script's other warnings go on as before)."""
        self.catcher = warnings.catch_warnings()  # restores the filters and showwarning at leave()
        self.catcher.__enter__()
        warnings.filterwarnings("always", message=f".*{SYNC_WORDS}")  # every sync, each counted
        self.shown = warnings.showwarning
        warnings.showwarning = self._seen

    def _seen(
        self, message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if SYNC_WORDS not in str(message):
            if self.shown is not None:
                self.shown(message, category, filename, lineno, file, line)
            return
        site = f"{_short(filename)}:{lineno}"
        with contextlib.suppress(Exception):  # the warning's own place stays if the stack cannot be read
            site = user_site(stack_of(sys._getframe(1))) or site
        self.sites[site] += 1

    def leave(self) -> dict[str, Any]:
        """{"syncs": n, "sync_sites": [{"site": "train.py:42", "count": k}, ...]} ({} when not counted)."""
        with contextlib.suppress(Exception):
            self.torch.cuda.set_sync_debug_mode(self.previous_mode)
        if self.catcher is None:
            return {}
        with contextlib.suppress(Exception):
            self.catcher.__exit__(None, None, None)
        self.catcher = self.shown = None
        sites, self.sites = self.sites, Counter()
        top = [{"site": site, "count": count} for site, count in sites.most_common(3)]
        return {"syncs": sum(sites.values()), "sync_sites": top}


def stack_of(frame: FrameType | None) -> list[tuple[str, int]]:
    """(file, line) of ``frame`` and its callers, innermost first."""
    out = []
    while frame is not None:
        out.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return out


def _library_dirs() -> tuple[str, ...]:
    """Where code that is not the user's lives: the standard library, installed packages, torch, gpumon."""
    import gpumon

    dirs = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.add(os.path.dirname(os.path.abspath(str(gpumon.__file__))))
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        dirs.add(os.path.dirname(os.path.abspath(str(torch.__file__))))
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs if d)


def is_library(path: str, dirs: Sequence[str] | None = None) -> bool:
    if path.startswith("<"):  # <frozen runpy>, <string>: no file of the user's
        return True
    if f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path:
        return True
    full = os.path.abspath(path)
    return any(full.startswith(d) for d in (dirs if dirs is not None else _library_dirs()))


def user_site(frames: Sequence[tuple[str, int]], dirs: Sequence[str] | None = None) -> str | None:
    """ "train.py:42": the innermost frame (``frames`` innermost first) in the user's code, with the library
    frame that made the sync where one stands between ("train.py:30 via trainer.py:2345"); None when no frame
    is the user's."""
    dirs = tuple(dirs) if dirs is not None else _library_dirs()
    via = None
    for path, line in frames:
        if not is_library(path, dirs):
            return f"{_short(path)}:{line}" + (f" via {via}" if via else "")
        parts = path.split(os.sep)
        third_party = "site-packages" in parts or "dist-packages" in parts
        if via is None and third_party and "torch" not in parts and "gpumon" not in parts:
            via = f"{_short(path)}:{line}"  # a library's own sync (the HF Trainer's), named beside the user's
    return None


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]
