"""How long each step waits for its data, and what the rank runs on: read with no code change.

``hook_dataloader`` wraps the DataLoader iterator's ``__next__`` (every DataLoader, single- or multi-process,
goes through ``_BaseDataLoaderIter.__next__``): two clock reads and an addition per batch, summed into
``Feed.waited``; the step events carry it per step (``wait``) at the telemetry's step rate, so nothing is
written per batch. The first batch of each iterator describes its loader once (``dataloader`` event:
workers, batch, pin_memory, where the dataset's ``__getitem__`` is). ``threads`` says what the rank computes
with (intra-op threads, the CPUs it may run on), again when the script changes it.

Without a DataLoader nothing is measured: timing the gap before each forward would need a hook on every
module call, far past the per-step budget (bench/feeding.py).
"""

from __future__ import annotations

import inspect
import os
import socket
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

_clock = time.perf_counter


class Feed:
    """One process's data wait since the last recorded step, and the loaders and threads still to report."""

    def __init__(self) -> None:
        self.waited = 0.0  # seconds spent in DataLoader __next__ since the last recorded step
        self.seen = False  # a DataLoader fed this process
        self.loaders: list[dict[str, Any]] = []  # descriptions not written yet
        self.described: set[tuple[Any, ...]] = set()
        self.threads: tuple[int, int] | None = None  # (intra-op threads, CPUs) last written

    def take_wait(self) -> float | None:
        """The wait since the last call (None when no DataLoader ever fed this process)."""
        if not self.seen:
            return None
        waited, self.waited = self.waited, 0.0
        return waited

    def describe(self, iterator: Any) -> None:
        info = loader_info(iterator)
        key = tuple(sorted((k, str(v)) for k, v in info.items()))
        if key not in self.described and len(self.described) < 32:  # a script making loaders per epoch: once
            self.described.add(key)
            self.loaders.append(info)

    def thread_change(self, torch: ModuleType) -> dict[str, Any] | None:
        """The ``threads`` event's fields when they changed since the last one written (first call: always)."""
        try:
            threads = int(torch.get_num_threads())
        except Exception:  # noqa: BLE001 - telemetry never stops training
            return None
        cpus = _cpus()
        if (threads, cpus) == self.threads:
            return None
        self.threads = (threads, cpus)
        return {
            "threads": threads,
            "cpus": cpus,
            "host": socket.gethostname(),
            "omp": os.environ.get("OMP_NUM_THREADS"),
        }


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def loader_info(iterator: Any) -> dict[str, Any]:
    """The DataLoader's own settings, as its iterator holds them (torch's private names, read defensively)."""
    sampler = getattr(iterator, "_index_sampler", None)
    dataset = getattr(iterator, "_dataset", None)
    info: dict[str, Any] = {
        "num_workers": getattr(iterator, "_num_workers", None),
        "batch_size": getattr(sampler, "batch_size", None),
        "pin_memory": getattr(iterator, "_pin_memory", None),
        "persistent_workers": getattr(iterator, "_persistent_workers", None),
        "prefetch_factor": getattr(iterator, "_prefetch_factor", None),
        "dataset": type(dataset).__qualname__ if dataset is not None else None,
    }
    getitem = getattr(type(dataset), "__getitem__", None)
    code = getattr(getitem, "__code__", None)
    if getitem is not None and code is not None:
        path = inspect.getsourcefile(getitem) or code.co_filename
        info["getitem"] = f"{os.path.basename(path)}:{code.co_firstlineno}"
        info["getitem_path"] = path
    return {k: v for k, v in info.items() if v is not None}


def hook_dataloader(torch: ModuleType, feed: Callable[[], Feed]) -> None:
    """Time every batch the script takes from a DataLoader; ``feed()`` is the current process's Feed."""
    try:
        from torch.utils.data.dataloader import _BaseDataLoaderIter
    except ImportError:
        return
    if not getattr(_BaseDataLoaderIter.__next__, "__gpumon__", False):
        _BaseDataLoaderIter.__next__ = timed_next(_BaseDataLoaderIter.__next__, feed)  # type: ignore[method-assign,assignment]


def timed_next(original: Callable[[Any], Any], feed: Callable[[], Feed]) -> Callable[[Any], Any]:
    """``original`` (an iterator's ``__next__``) with its time added to ``feed().waited``."""

    def __next__(self: Any) -> Any:
        start = _clock()
        try:
            return original(self)
        finally:
            state = feed()
            state.waited += _clock() - start
            if not state.seen or getattr(self, "_gpumon_seen", None) is not state:
                state.seen = True
                try:
                    self._gpumon_seen = state
                    state.describe(self)
                except Exception:  # noqa: BLE001 - an iterator with __slots__: measured, not described
                    pass

    __next__.__wrapped__ = original  # type: ignore[attr-defined]
    __next__.__gpumon__ = True  # type: ignore[attr-defined]
    return __next__


def optimizer_lr(optimizer: Any) -> float | None:
    """The first parameter group's learning rate (a float, or a one-element tensor for capturable optimizers)."""
    try:
        value = optimizer.param_groups[0]["lr"]
        return float(value) if isinstance(value, int | float) else float(value.item())
    except Exception:  # noqa: BLE001 - a custom optimizer: no lr
        return None


def hook_clip(torch: ModuleType, on_norm: Callable[[Any], None]) -> None:
    """``torch.nn.utils.clip_grad_norm_`` returns the norm before clipping: hand it over (a tensor, not read)."""
    utils = getattr(getattr(torch, "nn", None), "utils", None)
    original = getattr(utils, "clip_grad_norm_", None)
    if original is None or getattr(original, "__gpumon__", False):
        return

    def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
        norm = original(*args, **kwargs)
        on_norm(norm)
        return norm

    clip_grad_norm_.__wrapped__ = original  # type: ignore[attr-defined]
    clip_grad_norm_.__doc__ = original.__doc__
    clip_grad_norm_.__gpumon__ = True  # type: ignore[attr-defined]
    utils.clip_grad_norm_ = clip_grad_norm_  # type: ignore[union-attr]
