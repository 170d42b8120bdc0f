"""How long each step waits for its data, and what the rank runs on: read with no code change.

``hook_dataloader`` wraps the DataLoader iterator's ``__next__`` (every DataLoader, single- or multi-process,
goes through ``_BaseDataLoaderIter.__next__``): two clock reads and an addition per batch, summed into
``Feed.waited``; the step events carry it per step (``wait``) at the telemetry's step rate, so nothing is
written per batch. ``DataLoader.__iter__`` is timed too: a loader without persistent workers starts its
workers there, every epoch. What a loader with workers waits at an epoch's edge (``__iter__``, the epoch's
first batch, the ``__next__`` that ends it and stops the workers) is also summed apart (``Feed.edge``, the
step event's ``epoch_wait``): the fold counts it as data wait however long it is, where a long wait in the
middle of an epoch reads as a pause (a SIGSTOP inside ``__next__``). The first batch of each iterator
describes its loader once (``dataloader`` event: workers, their start method, batch, pin_memory, where the
dataset's ``__getitem__`` is). ``threads`` says what the rank computes with (intra-op threads, the CPUs it
may run on), again when the script changes it.

Samples per step: each batch's size, summed between two recorded steps (``Feed.samples``; with gradient
accumulation, every micro-batch of a step), is the step event's ``samples`` (per step). A batch's size is
known only where the loader batches its dataset's items itself (``batch_size`` set: auto-collation) and
every tensor at the top of the batch (a tensor, a tuple, a list or a dict of them) has the same first
dimension; with a ``collate_fn`` of the script's own only a batch of exactly ``batch_size`` counts (a
collate may pack or flatten). Anything else (``batch_size=None``, a batch of strings, tensors that
disagree) makes that interval's samples unknown: never a guess. The fold turns it into samples a second at
the run's pace, from the median of a rank's recent intervals (an evaluation's batches between two steps
make one interval stand out: the model's eval mode cannot tell them, as Lightning sets ``training`` back
without a call and a script may keep a frozen part in eval).

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
        self.waited = 0.0  # seconds spent in DataLoader __iter__/__next__ since the last recorded step
        self.edge = 0.0  # of those, at an epoch's edge of a loader with workers (workers starting, stopping)
        self.epochs = 0  # epochs such a loader began since the last recorded step
        self.seen = False  # a DataLoader fed this process
        self.loaders: list[dict[str, Any]] = []  # descriptions not written yet
        self.described: set[tuple[Any, ...]] = set()
        self.threads: tuple[int, int] | None = None  # (intra-op threads, CPUs) last written
        self.on_batch: Callable[[Any], None] | None = None  # each batch's shape (flops.py)
        self.samples = 0  # samples in the batches since the last recorded step
        self.unsized = False  # ... one of which had no size known: the interval's samples are unknown

    def take_wait(self) -> float | None:
        """The wait since the last call (None when no DataLoader ever fed this process)."""
        if not self.seen:
            return None
        waited, self.waited = self.waited, 0.0
        return waited

    def count(self, batch: Any, iterator: Any) -> None:
        """A batch the loop drew: its size into ``samples``, or the interval marked unknown."""
        size = batch_size(batch, iterator)
        if size is None:
            self.unsized = True
        else:
            self.samples += size

    def take_samples(self) -> int | None:
        """Samples drawn since the last call; None where one batch's size was not known (or none was drawn)."""
        samples, unsized, self.samples, self.unsized = self.samples, self.unsized, 0, False
        return samples if samples and not unsized else None

    def take_edge(self) -> tuple[float, int]:
        """(seconds at epochs' edges, epochs begun) since the last call."""
        edge, epochs, self.edge, self.epochs = self.edge, self.epochs, 0.0, 0
        return edge, epochs

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


def batch_size(batch: Any, iterator: Any) -> int | None:
    """The samples in a DataLoader batch: the first dimension its top-level tensors share, where the loader
    batched them itself; None where that is not sure (see the module's docstring)."""
    if not getattr(iterator, "_auto_collation", False):
        return None  # batch_size=None: a batch is whatever the dataset gives
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else (batch,)
    size = None
    for item in items:
        shape = getattr(item, "shape", None)
        if shape is None or not shape:
            return None  # a string, a list, a number, a 0-d tensor: no batch dimension to read
        if size is None:
            size = shape[0]
        elif shape[0] != size:
            return None
    if size is None:
        return None
    if getattr(iterator, "_collate_fn", None) is not _DEFAULT_COLLATE[0]:
        full = getattr(getattr(iterator, "_index_sampler", None), "batch_size", None)
        return int(size) if size == full else None  # a collate of the script's own: a full batch only
    return int(size)


def _default_collate() -> Any:
    try:
        from torch.utils.data._utils.collate import default_collate
    except ImportError:
        return None
    return default_collate


_DEFAULT_COLLATE: list[Any] = [None]  # torch's default_collate, once torch is imported (hook_dataloader)


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
        "start_method": _start_method(getattr(iterator, "_workers", None)),
        "dataset": type(dataset).__qualname__ if dataset is not None else None,
    }
    getitem = getattr(type(dataset), "__getitem__", None)
    code = getattr(getitem, "__code__", None)
    if getitem is not None and code is not None:
        path = inspect.getsourcefile(getitem) or code.co_filename
        info["getitem"] = f"{os.path.basename(path)}:{code.co_firstlineno}"
        info["getitem_path"] = path
    return {k: v for k, v in info.items() if v is not None}


def _start_method(workers: Any) -> str | None:
    """How the loader's workers were started: their context's method ("fork", "spawn", "forkserver")."""
    if not workers:
        return None
    method = getattr(type(workers[0]), "_start_method", None)
    if isinstance(method, str):
        return method
    import multiprocessing

    try:  # the default context: the method its first start fixed (never fixed here: allow_none)
        return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    except (RuntimeError, ValueError, IndexError):
        return None


def hook_dataloader(torch: ModuleType, feed: Callable[[], Feed]) -> None:
    """Time every batch the script takes from a DataLoader; ``feed()`` is the current process's Feed."""
    try:
        from torch.utils.data.dataloader import DataLoader, _BaseDataLoaderIter
    except ImportError:
        return
    _DEFAULT_COLLATE[0] = _default_collate()
    if not getattr(_BaseDataLoaderIter.__next__, "__gpumon__", False):
        _BaseDataLoaderIter.__next__ = timed_next(_BaseDataLoaderIter.__next__, feed)  # type: ignore[method-assign,assignment]
    if not getattr(DataLoader.__iter__, "__gpumon__", False):
        DataLoader.__iter__ = timed_iter(DataLoader.__iter__, feed)  # type: ignore[method-assign]


def timed_iter(original: Callable[[Any], Any], feed: Callable[[], Feed]) -> Callable[[Any], Any]:
    """``DataLoader.__iter__``: where workers start (each epoch without ``persistent_workers``), timed as
    data wait, and as an epoch's edge for a loader with workers."""

    def __iter__(self: Any) -> Any:
        start = _clock()
        try:
            return original(self)
        finally:
            state, spent = feed(), _clock() - start
            state.waited += spent
            if _workers(getattr(self, "num_workers", 0)):
                state.edge += spent

    __iter__.__wrapped__ = original  # type: ignore[attr-defined]
    __iter__.__gpumon__ = True  # type: ignore[attr-defined]
    return __iter__


def _workers(value: Any) -> bool:
    return isinstance(value, int) and value > 0


def timed_next(original: Callable[[Any], Any], feed: Callable[[], Feed]) -> Callable[[Any], Any]:
    """``original`` (an iterator's ``__next__``) with its time added to ``feed().waited``; for an iterator
    with workers, its epoch's first batch and the call that ends the epoch to ``feed().edge`` too."""

    def __next__(self: Any) -> Any:
        # torch's count of batches given this epoch (0 again after a persistent iterator's reset)
        first = getattr(self, "_num_yielded", None) == 0 and _workers(getattr(self, "_num_workers", 0))
        start, ended = _clock(), first
        try:
            batch = original(self)
        except StopIteration:
            ended = _workers(getattr(self, "_num_workers", 0))  # non-persistent workers are stopped here
            raise
        finally:
            state, spent = feed(), _clock() - start
            state.waited += spent
            if ended:
                state.edge += spent
                state.epochs += int(first)
            if not state.seen or getattr(self, "_gpumon_seen", None) is not state:
                state.seen = True
                try:
                    self._gpumon_seen = state
                    state.describe(self)
                except Exception:  # noqa: BLE001 - an iterator with __slots__: measured, not described
                    pass
        state.count(batch, self)
        if state.on_batch is not None:  # flops.py: a batch of a new shape makes a count due
            state.on_batch(batch)
        return batch

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
