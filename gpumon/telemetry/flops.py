"""FLOPs per step with no code: one real step counted by PyTorch's own ``FlopCounterMode``.

The step hook (``steps.py``) calls ``FlopCount.tick`` at every step (an integer compare and an identity test:
nothing else while no count is due). At step ``WARM`` (after warm-up) the counter is entered right after
that step's optimizer step, and left at the next one, so the window is exactly one step: its forward, its
backward (every micro-batch of an accumulated step) and its optimizer step. It counts again when the
batch takes a shape not counted yet (a batch-size warm-up, a new sequence length), at most ``MAX_COUNTS``
shapes and never within ``GAP`` steps of the last count; the shape each count is of is kept (``by_shape``,
at most ``MAX_COUNTS``), so a shape seen before is not counted again: its count is written again, for the
step it came back at. The batch's shape is the DataLoader's batch (``batch``); a process no DataLoader
feeds shows it to the first module call of a step instead (the model's input: a global forward pre-hook
for that one call, put in every ``GAP`` steps, ``probe``). A shape seen for a single batch (an epoch's
short last batch) is counted only if it is still the shape when the count is due. Counting reads shapes
only: no host-device sync. An evaluation inside the window (``phases``: the model switched to eval) spoils
it; the next step is tried.

Where the counter sees nothing (compiled code whose kernels it cannot see), the step is estimated as 6N
per token (PaLM appendix B; attention left out) from the parameters the optimizer holds and the tokens
the step embedded (``nn.Embedding`` inputs seen in the window, else the batch's integer 2-D tensor),
and the event says so (``method``: ``counted`` or ``estimate``, ``why``). Each count writes a ``flops``
event (docs/events.md); the monitor turns it into achieved FLOP/s and MFU (``core/runs/reading/use.py``).
"""

from __future__ import annotations

import contextlib
import time
from types import ModuleType
from typing import Any

from gpumon.telemetry import phases
from gpumon.telemetry.copies import CopyWatch
from gpumon.telemetry.gpu_watch import SyncCount

WARM = 3  # the counter enters after this step: the first steps hold lazy inits and compile warm-up
MAX_COUNTS = 8  # per process: a run whose batches change shape every step is not counted every step
GAP = 20  # steps between two counts at least


def batch_shape(batch: Any) -> Any:
    """A cheap signature of a DataLoader batch: its tensors' shapes (top level of a tuple, list or dict)."""
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else (batch,)
    return tuple(getattr(item, "shape", None) for item in items)


def shape_value(shape: Any) -> list[list[int] | None]:
    """A batch signature as the event writes it: one list of sizes per item (None where no tensor)."""
    return [None if item is None else [int(n) for n in item] for item in shape]


def batch_tokens(batch: Any) -> int | None:
    """Tokens in a batch: the elements of its first integer tensor of two or more dimensions (input ids)."""
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else (batch,)
    for item in items:
        dtype, shape = getattr(item, "dtype", None), getattr(item, "shape", None)
        if shape is not None and len(shape) >= 2 and dtype is not None and not dtype.is_floating_point:
            with contextlib.suppress(Exception):
                if not dtype.is_complex and str(dtype) != "torch.bool":
                    return int(item.numel())
    return None


class FlopCount:
    """One process's counting state: which step is counted next, the counter while it is entered."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.counts = 0
        self.due: int | None = WARM  # the counter enters after this step (or a later one); None: none due
        self.last_step = -GAP
        self.by_shape: dict[Any, dict[str, Any]] = {}  # batch shape -> its count's fields (at most MAX_COUNTS)
        self.written: Any = None  # the shape of the latest flops event written
        self.shape: Any = None  # the latest batch's shape (the DataLoader hook's, else the probe's)
        self.tokens_seen: int | None = None  # tokens of that batch
        self.from_loader = False  # a DataLoader feeds this process: its batches give the shape
        self.probe_at = GAP  # no DataLoader: the model's input is looked at after this step (and every GAP)
        self.window_shape: Any = None  # the shape of the batches inside the counted window
        self.mixed = False  # the window saw batches of two shapes: its count is of no one shape
        self.active: Any = None  # the entered counter
        self.embed: dict[int, int] = {}  # nn.Embedding id -> integer inputs' elements in the window
        self.hook: Any = None
        self.began = 0.0
        self.phase = 0  # the model's mode changes seen when the counter entered
        self.failed = False
        self.syncs: SyncCount | None = None  # CUDA only: the counted step's synchronising ops (gpu_watch.py)

    def batch(self, batch: Any) -> None:
        """The DataLoader gave ``batch``: a shape not counted yet makes a count due (within the limits)."""
        if not self.from_loader:
            self.from_loader, self.probe_at = True, 1 << 62  # the loader says the shape: no probe
        self._saw(batch)

    def _saw(self, batch: Any) -> None:
        shape = batch_shape(batch)
        if self.active is not None:
            if self.window_shape is None:
                self.window_shape = shape
            elif shape != self.window_shape:
                self.mixed = True
        if shape == self.shape:
            return
        self.shape, self.tokens_seen = shape, batch_tokens(batch)
        if self.due is None and self.counts and self.active is None:
            if shape in self.by_shape:
                self.due = 0 if shape != self.written else None  # counted before: its count again, no counting
            elif self.counts < MAX_COUNTS:
                self.due = self.last_step + GAP

    def tick(self, step: int, optimizer: Any, write: Any) -> None:
        """Step ``step`` ended (after its optimizer step). ``write(type, **fields)`` writes an event."""
        if self.active is not None:
            self._leave(step, optimizer, write)
        elif self.due is not None and step >= self.due and not self.failed:
            known = self.by_shape.get(self.shape) if self.counts else None
            if known is None:
                self._enter()
            else:  # the shape went back to one counted (or a one-batch shape passed): no counting
                self.due = None
                if self.shape != self.written:
                    self.written = self.shape
                    write("flops", **{**known, "step": step})
        elif step >= self.probe_at and self.counts and not self.failed:
            self.probe_at = step + GAP
            self._probe()

    def _probe(self) -> None:
        """The next module call's input (the model's, at the next step's forward) as the batch, once."""
        hooks = self.torch.nn.modules.module

        def look(module: Any, args: Any) -> None:
            handle.remove()
            self._saw(args)

        with contextlib.suppress(Exception):
            handle = hooks.register_module_forward_pre_hook(look)

    def _enter(self) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if _get_current_dispatch_mode() is not None:
            return  # the script runs under a dispatch mode of its own: ours must not nest into it
        counter = _counter_class(self.torch)(display=False)
        self.embed = {}
        self.window_shape, self.mixed = None, False
        embedding = self.torch.nn.Embedding
        first = [not self.from_loader]  # no DataLoader: the window's first module call shows the batch

        def pre(module: Any, args: Any) -> None:
            if first[0]:
                first[0] = False
                self._saw(args)
            if isinstance(module, embedding) and args:
                ids = args[0]
                if not getattr(getattr(ids, "dtype", None), "is_floating_point", True):
                    self.embed[id(module)] = self.embed.get(id(module), 0) + int(ids.numel())

        try:
            self.hook = self.torch.nn.modules.module.register_module_forward_pre_hook(pre)
            counter.__enter__()
        except Exception:  # noqa: BLE001 - this torch has no such counter: never tried again
            self.failed = True
            self._unhook()
            return
        self.active, self.began, self.phase = counter, time.perf_counter(), phases.changes()
        if self.torch.cuda.is_initialized():  # a CPU run pays nothing for it
            self.syncs = SyncCount(self.torch)
            self.syncs.enter()

    def _leave(self, step: int, optimizer: Any, write: Any) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        counter = self.active
        if _get_current_dispatch_mode() is not counter.mode:
            return  # a mode the script entered is still on top: leave ours at a later step
        spent = time.perf_counter() - self.began
        self.active = None
        syncs, self.syncs = (self.syncs.leave() if self.syncs is not None else {}), None
        try:
            counter.__exit__(None, None, None)
        except Exception:  # noqa: BLE001
            self.failed = True
        self._unhook()
        if self.failed:
            return
        if phases.changes() != self.phase:
            self.due = 0  # the model went to eval (or back) inside the window: count the next step
            return
        total = int(counter.get_total_flops())
        tokens = max(self.embed.values()) if self.embed else self.tokens_seen
        fields: dict[str, Any] = {"step": step, "count_s": round(spent, 6)}
        params = _params(optimizer)
        if total > 0:
            fields.update(flops=total, method="counted", dtypes=dict(counter.by_dtype))
        elif params and tokens:
            first = next(iter(optimizer.param_groups[0]["params"]), None)
            dtype = dtype_key(self.torch, first, "mm")  # autocast is not seen here: the parameters' dtype
            fields.update(flops=6 * params * tokens, method="estimate", dtypes={dtype: 6 * params * tokens})
            fields["why"] = (
                "FlopCounterMode saw no FLOPs (compiled code): 6N per token (attention left out), "
                f"in the parameters' dtype ({dtype})"
            )
        else:
            fields.update(flops=None, method="none")
            fields["why"] = "FlopCounterMode saw no FLOPs (compiled code) and the batch is no tokens to estimate from"
        if tokens:
            fields["tokens"] = tokens
        if params:
            fields["params"] = params
        if counter.devices:
            fields["dev"] = sorted(counter.devices)[0]
        fields.update(syncs)
        if h2d := counter.copies.take():
            fields["h2d"] = h2d
        # the window's batches' shape (no batch in it: the latest); None: two shapes in one step
        shape = None if self.mixed else self.window_shape if self.window_shape is not None else self.shape
        if shape is not None:
            fields["shape"] = shape_value(shape)
            if shape in self.by_shape or len(self.by_shape) < MAX_COUNTS:
                self.by_shape[shape] = {**{k: v for k, v in fields.items() if k != "step"}, "counted_at": step}
        self.counts += 1
        self.last_step, self.due, self.written = step, None, shape
        if self.shape != shape and self.shape not in self.by_shape and self.counts < MAX_COUNTS:
            self.due = step + GAP  # the batch changed during the window: the new shape's turn comes
        write("flops", **fields)

    def _unhook(self) -> None:
        if self.hook is not None:
            with contextlib.suppress(Exception):
                self.hook.remove()
            self.hook = None


def _params(optimizer: Any) -> int | None:
    """The elements of the parameters the optimizer updates (the N of 6N)."""
    try:
        return sum(int(p.numel()) for group in optimizer.param_groups for p in group["params"]) or None
    except Exception:  # noqa: BLE001 - no optimizer (a step is a backward), or a custom one
        return None


_CLASS: Any = None


def _counter_class(torch: ModuleType) -> Any:
    """``FlopCounterMode`` that also adds each op's FLOPs up by the dtype it runs in (``bf16``, ``tf32``...)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from torch.utils.flop_counter import FlopCounterMode

    class Counter(FlopCounterMode):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.by_dtype: dict[str, int] = {}
            self.devices: set[str] = set()
            self.copies = CopyWatch(torch)  # the step's host-to-device copies (copies.py)

        def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
            counts = self.flop_counts["Global"]
            before = counts.get(func_packet, 0)
            result = super()._count_flops(func_packet, out, args, kwargs)
            if func_packet in self.copies.ops:
                self.copies.see(func_packet, out, args, kwargs)
            added = self.flop_counts["Global"].get(func_packet, 0) - before
            if added:
                first = next((a for a in args if isinstance(a, torch.Tensor)), None)
                key = dtype_key(torch, first, func_packet)
                self.by_dtype[key] = self.by_dtype.get(key, 0) + added
                if first is not None:
                    self.devices.add(str(first.device))
            return result

    _CLASS = Counter
    return Counter


def dtype_key(torch: ModuleType, tensor: Any, op: Any) -> str:
    """What the op's math runs in: ``bf16``, ``fp16``, ``fp8``, ``fp64``, ``tf32`` (fp32 on CUDA with TF32 on
    for matmuls, or for convolutions: cuDNN's own switch), else ``fp32``."""
    dtype = getattr(tensor, "dtype", None)
    if dtype is torch.bfloat16:
        return "bf16"
    if dtype is torch.float16:
        return "fp16"
    if dtype is torch.float64:
        return "fp64"
    if dtype is not None and "float8" in str(dtype):
        return "fp8"
    if dtype is torch.float32 and getattr(tensor, "is_cuda", False):
        conv = "conv" in str(op)
        backends = torch.backends
        allowed = backends.cudnn.allow_tf32 if conv else backends.cuda.matmul.allow_tf32
        return "tf32" if allowed else "fp32"
    return "fp32"
