"""The loss with no code change: the tensors ``backward()`` starts from, summed over an optimizer step.

Accelerate, Lightning and plain loops all end in ``torch.autograd.backward(loss)``; with AMP
the root is ``scaler.scale(loss)``, whose input (the unscaled loss) is remembered by a hook
on ``torch.amp.GradScaler.scale``. At each backward only a ``detach()``ed reference is kept
(never the graph); its value is read when a step is recorded, at the telemetry's step rate:
``.item()`` on a CPU tensor, and on a device a non-blocking copy into pinned memory started
at one recorded step and read at the next once its event says it is done, so no step ever
waits for the device.

A step's loss is the SUM of the roots of the backward passes since the previous optimizer step
(``close``): the loss whose gradient that step applies. With gradient accumulation scaled the usual
way (``(loss / accum).backward()`` per micro-batch: plain loops, Accelerate's ``backward``,
Lightning's ``accumulate_grad_batches``, HF Trainer's ``gradient_accumulation_steps``) that is
the mean of the micro-batches' losses, what those frameworks log and what such a script prints as
its step's loss; without accumulation it is the one root. A script that does not scale (``loss.backward()``
per micro-batch) applies the gradient of the sum, and the sum is what gpumon shows (accum x the
micro-batches' mean): gpumon cannot tell what else the script means. A backward only appends its
detached root to a list; the roots are added up when a step is read (at the step rate, on their device,
no sync), or every ``FOLD`` roots in a step of very many micro-batches. A step of another optimizer (a GAN's
second) drops what was summed for it; so does ``GradScaler.update`` after a step the scaler skipped
(inf gradients: no optimizer step, and the next step's loss must not hold this one's). Where steps
are backward passes (no optimizer), each step's loss is its own root (``close(alone=True)``).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpumon.core.events import VERSION

SOURCE = "backward"
FOLD = 64  # roots kept for one step before they are added up (a step of more micro-batches than that)


def _sum(roots: list[Any]) -> Any:
    """The roots added up (on their device, asynchronous: never a sync); None where they cannot be (two devices,
    or an earlier sum that failed)."""
    total = roots[0]
    try:
        for root in roots[1:]:
            total = total + root
    except Exception:  # noqa: BLE001 - the step's loss is not known: none rather than a part of it
        return None
    return total


class BackwardLoss:
    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.latest: Any = None  # the last closed step's loss, detached, not read yet
        self.step = 0  # the step it belongs to
        self.open: list[Any] = []  # the roots since the last optimizer step (detached), added up when read
        self.scaled: Any = None  # weakref to the last tensor a GradScaler returned
        self.unscaled: Any = None  # ... and the loss it scaled (detached)
        self.pending: tuple[int, Any, Any] | None = None  # (step, pinned host copy, event) on its way
        self.pinned: Any = None

    def at_backward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """After a ``torch.autograd.backward`` that returned: add its root to the step's sum when given no
        gradient (torch then made sure the root is one element: a loss)."""
        if (len(args) > 1 and args[1] is not None) or kwargs.get("grad_tensors") is not None:
            return  # backward(gradient=...): not a loss
        root = args[0] if args else kwargs.get("tensors")
        if not isinstance(root, self.torch.Tensor):
            return  # a list of roots: no single loss
        scaled = self.scaled
        value = self.unscaled if scaled is not None and scaled() is root else root.detach()
        roots = self.open
        roots.append(value)
        if len(roots) >= FOLD:  # a step of very many micro-batches: bounded, one add each now and then
            self.open = [_sum(roots)]

    def close(self, step: int, alone: bool = False) -> None:
        """Optimizer step ``step`` ended: its loss is what was summed since the last one (``alone``: the latest
        root only, where a step is a backward pass)."""
        roots = self.open[-1:] if alone else self.open
        self.open = []
        if roots:
            self.latest, self.step = roots, step

    def drop(self) -> None:
        """What was summed belongs to no counted step (another optimizer's, or a step the GradScaler skipped)."""
        self.open = []

    def at_scale(self, outputs: Any, scaled: Any) -> None:
        """``GradScaler.scale(outputs)`` returned ``scaled``: backward from it means ``outputs``."""
        if isinstance(outputs, self.torch.Tensor) and scaled is not outputs and outputs.numel() == 1:
            self.scaled = weakref.ref(scaled)
            self.unscaled = outputs.detach()

    def read(self) -> tuple[int, float] | None:
        """(step, loss) when a value is ready, at most once per backward root; never waits for a device."""
        done = None
        pending = self.pending
        if pending is not None and pending[2].query():
            done = (pending[0], float(pending[1].item()))
            self.pending = None
            self.pinned = pending[1]
        latest = self.latest
        if latest is None:
            return done
        self.latest = None
        if isinstance(latest, list):  # a step's roots: added up here, at the step rate, on their device
            latest = _sum(latest)
            if latest is None:
                return done
        if latest.device.type == "cpu":
            return self.step, float(latest.item())
        if self.pending is None:
            self._copy(latest)
        return done

    def _copy(self, latest: Any) -> None:
        torch = self.torch
        try:
            if self.pinned is None or self.pinned.dtype != latest.dtype:
                self.pinned = torch.empty((), dtype=latest.dtype, pin_memory=True)
            pinned = self.pinned
            pinned.copy_(latest.reshape(()), non_blocking=True)
            event = torch.cuda.Event() if latest.device.type == "cuda" else None
            if event is None:
                return  # another device kind: no event to ask, no value (never a sync)
            event.record()
            self.pending = (self.step, pinned, event)
            self.pinned = None  # the next copy gets its own buffer while this one is on its way
        except Exception:  # noqa: BLE001 - no loss rather than a failed step
            self.pending = None


def metrics_line(source: str, step: int, value: float, now: float, pid: int) -> bytes:
    """The ``metrics`` event of a loss, formatted directly: ~1 µs where ``encode`` takes ~10 (every step at
    ``GPUMON_STEP_RATE=0``). ``source`` is ``rank<N>``; NaN and inf are strings, as ``encode`` writes them."""
    number = repr(value) if math.isfinite(value) else f'"{value}"'
    return (
        f'{{"v":{VERSION},"type":"metrics","src":"{source}","t":{now!r},"pid":{pid},"step":{step},'
        f'"metrics":{{"loss":{number}}},"source":"{SOURCE}"}}\n'
    ).encode()


def hook_scaler(
    torch: ModuleType, on_scale: Callable[[Any, Any, Any], None], on_update: Callable[[], None] | None = None
) -> None:
    """Wrap ``torch.amp.GradScaler.scale`` (``torch.cuda.amp.GradScaler`` inherits it): ``on_scale(scaler,
    outputs, result)`` after each call; and ``GradScaler.update``: ``on_update()`` after it (once per iteration,
    whether the scaler stepped the optimizer or skipped it)."""
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    update = getattr(scaler, "update", None)
    if on_update is not None and update is not None and not getattr(update, "__gpumon__", False):

        def updated(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = update(self, *args, **kwargs)
            on_update()
            return result

        updated.__wrapped__ = update  # type: ignore[attr-defined]
        updated.__doc__ = update.__doc__
        updated.__gpumon__ = True  # type: ignore[attr-defined]
        scaler.update = updated  # type: ignore[union-attr]
    original = getattr(scaler, "scale", None)
    if original is None or getattr(original, "__gpumon__", False):
        return

    def scale(self: Any, outputs: Any) -> Any:
        result = original(self, outputs)
        on_scale(self, outputs, result)
        return result

    scale.__wrapped__ = original  # type: ignore[attr-defined]
    scale.__doc__ = original.__doc__
    scale.__gpumon__ = True  # type: ignore[attr-defined]
    scaler.scale = scale  # type: ignore[union-attr]
