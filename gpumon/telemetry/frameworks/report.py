"""What every framework hook shares: numbers read without a device sync, rate-limited
``metrics`` events, ``total`` events, and a guard so a hook never raises into the script."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpumon import telemetry

STEP_RATE_ENV = "GPUMON_STEP_RATE"  # the bootstrap's step rate: metrics are written no faster
STEP_RATE = 200
DONE_GAP = 1.0  # a total's progress (``done``) is written at most once a second

F = TypeVar("F", bound=Callable[..., Any])
_broken: set[str] = set()


def guarded(source: str, fn: F) -> F:
    """``fn`` that never raises: its first failure is noted once and that hook stays quiet after it."""

    # Held in the closure: at interpreter exit a module's globals are None, and objects collected then
    # (a tqdm bar's __del__ calls close) still reach this call.
    broken, note, suppress = _broken, telemetry.note, contextlib.suppress

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            if source in broken:
                return None
            return fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - telemetry never stops training
            broken.add(source)
            with suppress(Exception):
                note(f"gpumon's {source} hook is off: {type(err).__name__}: {err}")
            return None

    return call  # type: ignore[return-value]


def _gap() -> float:
    try:
        rate = int(os.environ.get(STEP_RATE_ENV, STEP_RATE))
    except ValueError:
        rate = STEP_RATE
    return 1.0 / rate if rate > 0 else 0.0


class Reporter:
    """One source's ``metrics`` and ``total`` events.

    Metrics come no faster than the step rate: values that arrive sooner wait (merged, latest wins) for
    the next write or for the exit, so the latest value is always written. A total is written when it
    changes; its progress at most once a second and at exit.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.gap = _gap()
        self.last = 0.0
        self.pending: dict[str, float] = {}
        self.pending_step: int | None = None
        self.total: int | None = None
        self.done: int | None = None
        self.done_written: int | None = None
        self.done_at = 0.0
        self.per_epoch = False
        self.lock = threading.Lock()
        atexit.register(self.flush)

    def due(self) -> bool:
        """Whether a write now would be within the rate (readers that cost something ask first)."""
        return time.monotonic() - self.last >= self.gap

    def metrics(self, values: Mapping[str, float], step: int | None = None, force: bool = False) -> None:
        if not values:
            return
        with self.lock:
            self.pending.update(values)
            if step is not None:
                self.pending_step = step
            if force or self.due():
                self._write_metrics()

    def _write_metrics(self) -> None:
        if not self.pending:
            return
        values, step = self.pending, self.pending_step
        self.pending, self.pending_step = {}, None
        self.last = time.monotonic()
        telemetry.event("metrics", step=step, metrics=values, source=self.source)

    def progress(
        self, total: int | None, done: int | None = None, force: bool = False, per_epoch: bool = False
    ) -> None:
        """The run's total as this source knows it, and how far it is, both in the source's own unit (a bar's
        micro-batches, HF's ``global_step``: a resumed job's count starts at its checkpoint's). ``per_epoch``:
        the total counts one epoch (a bar over a DataLoader), not the run."""
        if total is None or total <= 0:
            return
        with self.lock:
            self.done = done if done is not None else self.done
            now = time.monotonic()
            changed = total != self.total or per_epoch != self.per_epoch
            if changed or force or (self.done != self.done_written and now - self.done_at >= DONE_GAP):
                self.total, self.done_written, self.done_at, self.per_epoch = total, self.done, now, per_epoch
                extra: dict[str, Any] = {"per_epoch": True} if per_epoch else {}
                if (steps := telemetry.steps_taken()) is not None:
                    extra["step"] = steps  # the optimizer steps taken so far: is ``done`` counted in them?
                telemetry.event("total", total_steps=total, done=self.done, source=self.source, **extra)

    def flush(self) -> None:
        with contextlib.suppress(Exception):
            with self.lock:
                self._write_metrics()
            if self.total is not None and self.done != self.done_written:
                self.progress(self.total, self.done, force=True, per_epoch=self.per_epoch)


class LazyNumber:
    """Numbers from values that may be tensors, without a device sync.

    Python and numpy numbers and CPU tensors are read at once (``.item()``). A CUDA tensor is copied to
    pinned memory with ``non_blocking=True`` and an event recorded behind the copy; its value is read at
    a later call once the event says the copy is done, so until then the previous value of that name is
    returned (the step rate bounds how often this happens).
    """

    def __init__(self) -> None:
        self.copies: dict[str, tuple[Any, Any]] = {}  # name -> (CPU copy, CUDA event)
        self.known: dict[str, float] = {}

    def read(self, name: str, value: Any) -> float | None:
        out = self._read(name, value)
        if out is not None:
            self.known[name] = out
            return out
        return self.known.get(name)

    def _read(self, name: str, value: Any) -> float | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            return parse_number(value)
        device = getattr(value, "device", None)
        if device is None:
            item = getattr(value, "item", None)  # numpy scalars
            if callable(item) and getattr(value, "size", 1) == 1:
                got = item()
                return float(got) if isinstance(got, int | float) and not isinstance(got, bool) else None
            return None
        if value.numel() != 1:
            return None
        if getattr(device, "type", "cpu") == "cpu":
            return float(value.detach().item())
        return self._from_device(name, value)

    def _from_device(self, name: str, value: Any) -> float | None:
        import torch  # the script imported it: this value is its tensor

        done = None
        copy = self.copies.get(name)
        if copy is not None and copy[1].query():
            done = float(copy[0].item())
            copy = None
        if copy is None:
            host = value.detach().reshape(()).to("cpu", non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(value.device))  # behind the copy, on the tensor's device
            self.copies[name] = (host, event)
        return done


def parse_number(text: str) -> float | None:
    """ "0.25", "nan", "inf", "-inf", "1.2e-3" as floats; anything else None."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def numbers(values: Mapping[str, Any], reader: LazyNumber, prefix: str = "") -> dict[str, float]:
    """The numeric entries of ``values`` (tensors read without a sync), named ``prefix + name``."""
    out: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        number = reader.read(name, value)
        if number is not None:
            out[name] = number
    return out


def report_after(cls: type, name: str, source: str, ours: Callable[..., Any], inside: threading.local) -> None:
    """Wrap ``cls.name`` so that ``ours(*args, **kwargs)`` runs after it, guarded; a method of the same hook
    that calls another (``inside``: one per hook) reports once."""
    original = getattr(cls, name)
    safe = guarded(source, ours)

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(inside, "busy", False):
            return original(self, *args, **kwargs)
        inside.busy = True
        try:
            result = original(self, *args, **kwargs)
        finally:
            inside.busy = False
        safe(*args, **kwargs)
        return result

    method._gpumon = True  # type: ignore[attr-defined]
    setattr(cls, name, method)
