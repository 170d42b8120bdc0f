"""The per-step hook: one ``step`` event per optimizer step (or backward), the backward-root loss.

A process becomes a rank here, at its first optimizer step or backward: only then does it
open its event file (``telemetry.writer()`` claims its rank and writes ``proc_start``).
The hook lives in every process of a run (it is inherited by fork), so its state belongs
to one pid: a forked child that trains starts its own count.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import time
import weakref
from types import ModuleType
from typing import Any

from gpumon import telemetry
from gpumon.core.events import EventWriter
from gpumon.telemetry import cuda_history, phases, ranks, ray_workers
from gpumon.telemetry.census_trigger import CensusTrigger
from gpumon.telemetry.collectives import Clock
from gpumon.telemetry.feeding import Feed, optimizer_lr
from gpumon.telemetry.flops import FlopCount
from gpumon.telemetry.gpu_watch import CatchUp
from gpumon.telemetry.loss import BackwardLoss, metrics_line
from gpumon.telemetry.pymem import PyMemTrigger

STEP_EVERY_ENV = "GPUMON_STEP_EVERY"  # record every Nth step (default 1)
STEP_RATE_ENV = "GPUMON_STEP_RATE"  # record at most this many steps a second (default 200; 0: no limit)
STEP_RATE = 200
FLOPS_ENV = "GPUMON_FLOPS"  # "0": no FLOPs count (flops.py)
BACKWARD_STEPS = 64  # backward passes without an optimizer step before a backward counts as the step
STARTED_NS = time.time_ns()  # census requests older than this process are not for it


def env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo2() -> Any:
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None  # not glibc (musl, macOS)
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


class StepRecorder:
    """The optimizer step post-hook: one ``step`` event per optimizer step.

    Only the first optimizer that steps is counted (the next one once it is gone), so a script with two
    optimizers (a GAN) still gets one sample per iteration. CUDA: one
    ``memory_stats_as_nested_dict`` call (no sync), then the peak is reset so each sample's
    peak is that step's; the host heap too. CPU: glibc's live heap bytes and RSS. A census of
    live tensors is taken when the run asks (``census_trigger.CensusTrigger``).
    """

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.every = max(1, env_int(STEP_EVERY_ENV, 1))
        rate = env_int(STEP_RATE_ENV, STEP_RATE)
        # Past `rate` steps a second, a step is recorded once `gap` has passed: the cost of a run (disk,
        # the supervisor's fold) stops growing with its speed. The last step is always recorded (atexit).
        self.gap = 1.0 / rate if rate > 0 else 0.0
        self.mallinfo2 = _mallinfo2()
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.statm: int | None = None
        self.told_torch = False  # the `torch` event is in this process's file
        self.clock = Clock()  # seconds in backward() and collectives (collectives.py): the wrappers hold it
        self._start(STARTED_NS)
        atexit.register(self.flush)
        telemetry.count_steps(self.count, self.flush)

    def count(self) -> int:
        """This process's optimizer steps (a forked child that has not stepped yet: none)."""
        return self.step if self.pid == os.getpid() else 0

    def _start(self, since_ns: int) -> None:
        """This process's own state (again in a forked child: its steps are its own)."""
        self.pid = os.getpid()
        self.joined = False  # this process has reported as a rank
        self.quiet = False  # a process that steps but is no rank of the run (a Tune trial)
        self.first: int | None = None
        self.first_alive: Any = None  # a weakref to that optimizer: once it is gone, the next one counts
        self.step = 0
        self.step_t = 0.0  # when the latest step was taken
        self.clock.take()  # a forked child's time is its own
        self.clock.take_cpu()
        self.clock.seq.clear()
        self.last: float | None = None  # the first step's time includes start-up: no dt
        self.recorded = 0  # the step of the last step event
        self.backwards = 0
        self.by_backward = False  # steps are backward passes (no optimizer steps)
        self.devices_seen: set[int] = set()
        self.loss = BackwardLoss(self.torch)
        self.group_created = False  # init_process_group ran: the rank may be named otherwise now
        self.held: tuple[int, float] | None = None  # the backward loss read, written one recorded step later
        self.feed = Feed()  # the DataLoader wait since the last recorded step (feeding.py)
        self.flops = FlopCount(self.torch) if os.environ.get(FLOPS_ENV, "1") != "0" else None
        if self.flops is not None:
            self.feed.on_batch = self.flops.batch
        self.catch_up: CatchUp | None = None  # CUDA only, from its first CUDA step (gpu_watch.py)
        self.norm = BackwardLoss(self.torch)  # clip_grad_norm_'s result, read as the loss is: never a sync
        self.scale = BackwardLoss(self.torch)  # the GradScaler's scale, likewise
        self.scaler: Any = None  # weakref to the last GradScaler that scaled a loss
        if self.statm is not None:
            with contextlib.suppress(OSError):
                os.close(self.statm)
        try:  # opened per process: /proc/self is resolved at open
            self.statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.statm = None
        run_dir = telemetry.run_dir()
        self.census = CensusTrigger(run_dir, self.torch, since_ns, self._heap) if run_dir else None
        self.pymem = PyMemTrigger(run_dir, since_ns, telemetry.rank, self.torch) if run_dir else None

    def _join(self) -> None:
        """This process steps: it is a rank from now on (its event file opens with ``proc_start``)."""
        if self.pid != os.getpid():
            self._start(time.time_ns())
            self.told_torch = False
        self.joined = True
        self.quiet = ray_workers.quiet(telemetry.run_dir())
        if self.quiet:
            return
        w = telemetry.writer()
        if w is not None and not self.told_torch:
            self.told_torch = True
            w.write("torch", version=getattr(self.torch, "__version__", "?"), **torch_import())
        if w is not None and (threads := self.feed.thread_change(self.torch)) is not None:
            w.write("threads", **threads)
        mp = sys.modules.get("multiprocessing")
        util = sys.modules.get("multiprocessing.util")
        if mp is not None and util is not None and mp.parent_process() is not None:
            with contextlib.suppress(Exception):  # a forked child leaves by os._exit: no atexit there
                util.Finalize(None, self.flush, exitpriority=0)

    def backward(self, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> None:
        """A backward pass (``torch.autograd.backward``'s arguments: its root is kept as the loss). Counted
        as the step only in a script whose optimizer never stepped in ``BACKWARD_STEPS`` of them (gradient
        accumulation steps an optimizer well before that)."""
        if not self.joined or self.pid != os.getpid():
            self._join()
        if self.quiet:
            return
        self.loss.at_backward(args, kwargs or {})
        self.backwards += 1
        if not self.by_backward:
            if self.first is not None or self.backwards < BACKWARD_STEPS:
                return
            self.by_backward = True
            self.step = self.backwards - 1
            telemetry.note(
                f"no torch.optim optimizer stepped in {BACKWARD_STEPS} backward passes: a step is a backward()"
            )
        self.loss.close(self.step + 1, alone=True)  # each backward is a step: its own root is its loss
        self._tick()

    def group(self) -> None:
        """``torch.distributed.init_process_group`` returned: look at the rank again at the next record."""
        self.group_created = True

    def scaled(self, scaler: Any, outputs: Any, result: Any) -> None:
        """``GradScaler.scale(outputs)`` returned ``result`` (AMP): a backward from it is ``outputs``' loss."""
        if not self.joined or self.pid != os.getpid():
            self._join()  # a backward follows: a forked child's own state must hold this scale
        if not self.quiet:
            self.loss.at_scale(outputs, result)
            if self.scaler is None or self.scaler() is not scaler:
                with contextlib.suppress(TypeError):
                    self.scaler = weakref.ref(scaler)

    def updated(self) -> None:
        """``GradScaler.update`` returned: roots summed since the last optimizer step belong to a step the
        scaler skipped (inf gradients), not to the next one."""
        if self.pid == os.getpid() and not self.by_backward:
            self.loss.drop()

    def clipped(self, norm: Any) -> None:
        """``clip_grad_norm_`` returned the gradients' norm before clipping (kept, read at the next record)."""
        if self.pid == os.getpid() and isinstance(norm, self.torch.Tensor):
            self.norm.latest, self.norm.step = norm.detach(), self.step + 1

    def __call__(self, optimizer: object, args: object, kwargs: object) -> None:
        if not self.joined or self.pid != os.getpid():
            self._join()
        if self.by_backward or self.quiet:
            return
        if id(optimizer) != self.first:
            # One optimizer's steps are the run's (a GAN's second one is left out), until it is gone: a
            # script that makes its optimizer again (per phase, per fold, in its loop) keeps counting.
            if self.first is not None and (self.first_alive is None or self.first_alive() is not None):
                self.loss.drop()  # what was summed since the last step was this optimizer's (a GAN's other one)
                return
            self.first = id(optimizer)
            try:
                self.first_alive = weakref.ref(optimizer)
            except TypeError:  # no weak references to it: it counts for the rest of the run
                self.first_alive = None
        self.loss.close(self.step + 1)  # the backward roots since the last optimizer step: this step's loss
        self._tick()

    def _tick(self) -> None:
        self.step += 1
        self.step_t = time.time()  # a step the rate limit holds back is written later with its own time (flush)
        if self.flops is not None:  # one step counted after warm-up (flops.py): an int compare otherwise
            self.flops.tick(self.step, self.first_alive() if self.first_alive else None, telemetry.event)
        if self.catch_up is not None:
            self.catch_up.tick()
        elif self.torch.cuda.is_initialized():  # a CPU run never gets here past this check
            with contextlib.suppress(Exception):
                self.catch_up = CatchUp(self.torch)
        if self.step % self.every:
            return
        now = time.time()
        if self.last is not None and now - self.last < self.gap:
            return
        self.record(now)

    def flush(self) -> None:
        """At exit: the last step, if the rate limit skipped it (the step count stays exact), and its loss."""
        if self.pid != os.getpid() or self.quiet:
            return
        with contextlib.suppress(Exception):  # telemetry never fails a run, not even at exit
            if self.step > self.recorded and self.step >= self.every:
                self.record(self.step_t)  # when it stepped, not now: the time after it is the run's end
            w = telemetry.writer() if self.held is not None else None
            if w is not None:
                self._emit_loss(w, time.time())

    def record(self, now: float) -> None:
        if self.group_created:
            self.group_created = False
            if ranks.recheck(telemetry.run_dir()):  # its process group appeared and names it otherwise
                telemetry.reopen()
                telemetry.event("torch", version=getattr(self.torch, "__version__", "?"))
        w = telemetry.writer()
        if w is None:
            return
        steps = self.step - self.recorded
        self.recorded = self.step
        dt = None if self.last is None else (now - self.last) / max(1, steps)  # per step, whatever was skipped
        self.last = now
        if dt is not None:
            phases.state.step_s = dt  # a no-grad stretch twice as long is an evaluation (phases.py)
        extra = self._optimizer_values(w, max(1, steps), dt is None)
        if self.census is not None and (left := self.census.take_left()):
            extra["census_left"] = left  # in this sample's heap, left by the census after the last one: gpumon's
        cuda = self.torch.cuda
        if cuda.is_initialized():
            index = cuda.current_device()
            if index not in self.devices_seen:
                self.devices_seen.add(index)
                self._device_event(w, index)
            # The nested form: memory_stats() flattens and sorts ~100 keys in Python (150 us a step on an H100).
            stats = cuda.memory_stats_as_nested_dict(index)
            cuda.reset_peak_memory_stats(index)
            alloc, reserved = (
                stats.get("allocated_bytes", {}).get("all", {}),
                stats.get("reserved_bytes", {}).get("all", {}),
            )
            if self.catch_up is not None and (dry := self.catch_up.take()) is not None:
                extra["gpu_dry"] = dry  # the share of steps the GPU had finished before the host queued the next
            w.write(
                "step",
                t=now,  # the step's own time (a held-back one is written later: flush)
                step=self.step,
                dt=dt,
                dev=f"cuda:{index}",
                alloc=alloc.get("current", 0),
                reserved=reserved.get("current", 0),
                peak=alloc.get("peak", 0),
                retries=stats.get("num_alloc_retries", 0),  # the allocator's early warnings (reading/allocator.py)
                ooms=stats.get("num_ooms", 0),
                heap=self._heap(),  # graphs kept alive grow the host, not the GPU
                rss=self._rss(),
                **extra,
            )
        else:
            w.write("step", t=now, step=self.step, dt=dt, dev="cpu", heap=self._heap(), rss=self._rss(), **extra)
        loss = self.loss.read()
        if loss is not None:
            self._emit_loss(w, now)
            self.held = loss
        if self.census is not None:
            self.census.at_step(self.step, now, w.write)
        if self.pymem is not None:
            self.pymem.at_step(self.step, now, w.write)

    def _optimizer_values(self, w: EventWriter, steps: int, first: bool = False) -> dict[str, Any]:
        """The step event's ``wait`` (DataLoader seconds per step; ``epoch_wait``: the part at epochs' edges,
        ``epochs``: how many began), ``samples`` (per step, from the DataLoader's batches; not at the first
        record, whose batches may include what a trainer fetched ahead), ``lr``, ``grad_norm`` and ``loss_scale``
        where the script has them; the loaders and thread counts not reported yet go out first."""
        feed = self.feed
        while feed.loaders:
            w.write("dataloader", **feed.loaders.pop(0))
        if (threads := feed.thread_change(self.torch)) is not None:
            w.write("threads", **threads)
        extra: dict[str, Any] = {}
        backward_s, collective_s = self.clock.take()
        cpu_s = self.clock.take_cpu()
        if backward_s or collective_s:  # where the step's time went: own work or waiting (collectives.py)
            extra["bw"], extra["coll"] = round(backward_s / steps, 6), round(collective_s / steps, 6)
            extra["cpu"] = round(cpu_s / steps, 6)
        waited = feed.take_wait()
        if waited is not None:
            extra["wait"] = round(waited / steps, 6)
            edge, epochs = feed.take_edge()
            if edge > 0 or epochs:  # workers started, stopped, first batches: data wait however long
                extra["epoch_wait"], extra["epochs"] = round(edge / steps, 6), epochs
            samples = feed.take_samples()
            if samples is not None and not first:
                extra["samples"] = round(samples / steps, 3)
        optimizer = self.first_alive() if self.first_alive is not None else None
        if optimizer is not None and (lr := optimizer_lr(optimizer)) is not None:
            extra["lr"] = lr
        if (norm := self.norm.read()) is not None:
            extra["grad_norm"] = norm[1]
        scaler = self.scaler() if self.scaler is not None else None
        scale = getattr(scaler, "_scale", None)
        if isinstance(scale, self.torch.Tensor):
            self.scale.latest, self.scale.step = scale, self.step
        if (value := self.scale.read()) is not None:
            extra["loss_scale"] = value[1]
        return extra

    def _emit_loss(self, w: EventWriter, now: float) -> None:
        """Held back one reading: by then a script that logs its own loss (``telemetry.log``) has, and wins."""
        held, self.held = self.held, None
        if held is not None and not telemetry.loss_logged():
            w.write_line(metrics_line(w.source, held[0], held[1], now, self.pid))

    def _device_event(self, w: EventWriter, index: int) -> None:
        """The device's size, once: the doctor projects when a growing rank fills it."""
        try:
            props = self.torch.cuda.get_device_properties(index)
            w.write("device", dev=f"cuda:{index}", name=str(props.name), total=int(props.total_memory))
            if (run_dir := telemetry.run_dir()) and not self.devices_seen - {index}:  # once: the first device
                cuda_history.watch_oom(self.torch, run_dir, telemetry.rank, w.write)  # the snapshot at an OOM
        except Exception as err:  # noqa: BLE001 - telemetry never stops training
            w.write("device", dev=f"cuda:{index}", error=f"{type(err).__name__}: {err}")

    def _heap(self) -> int | None:
        if self.mallinfo2 is None:
            return None
        info = self.mallinfo2()
        return int(info.uordblks + info.hblkhd)

    def _rss(self) -> int | None:
        if self.statm is None:
            return None
        try:
            return int(os.pread(self.statm, 128, 0).split()[1]) * self.page
        except (OSError, IndexError, ValueError):
            return None


def torch_import() -> dict[str, float]:
    """``import_s``: the seconds the script's ``import torch`` took, where gpumon watched it (start-up no script
    can skip: the doctor's start-up finding leaves it out)."""
    from gpumon.telemetry.imports import TOOK

    return {"import_s": round(TOOK["torch"], 3)} if "torch" in TOOK else {}
