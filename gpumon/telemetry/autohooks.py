"""Per-step memory samples and exception records for any Python training script.

The bootstrap (``bootstrap/sitecustomize.py``) calls ``install()`` at start-up in
every process of a run. Nothing here imports torch: a finder waits for the
script's own ``import torch`` and then registers torch's global optimizer
step post-hook, so a script that never imports torch pays nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import time
import traceback
from collections.abc import Sequence
from types import ModuleType, TracebackType
from typing import Any

from gpumon import telemetry
from gpumon.core.events import EventWriter
from gpumon.telemetry import frameworks
from gpumon.telemetry.census import CensusTrigger

TORCHRUN_ENV = "GPUMON_TORCHRUN"  # the run's main process is torchrun (whose agent is not a rank)
RANK_LOGS_ENV = "GPUMON_RANK_LOGS"  # send each rank's stdout/stderr to logs/rank<N>.log
OWNER_ENV = "GPUMON_INSTRUMENTED_PID"  # children of an instrumented process are left alone
STEP_EVERY_ENV = "GPUMON_STEP_EVERY"  # record every Nth step (default 1)
STEP_RATE_ENV = "GPUMON_STEP_RATE"  # record at most this many steps a second (default 200; 0: no limit)
STEP_RATE = 200
BACKWARD_STEPS = 64  # backward passes without an optimizer step before a backward counts as the step
STARTED_NS = time.time_ns()  # census requests older than this process are not for it


def install() -> bool:
    """Instrument this process if it is a rank of a gpumon run; True when it did."""
    if not telemetry.enabled():
        return False
    if os.environ.get(TORCHRUN_ENV) and "RANK" not in os.environ:
        return False  # torchrun's agent: its output is the launcher log, its children are the ranks
    owner = os.environ.get(OWNER_ENV)
    if owner and owner != str(os.getpid()):
        return False  # a DataLoader worker or other helper of an instrumented rank
    os.environ[OWNER_ENV] = str(os.getpid())
    w = telemetry.writer()
    if w is None:
        return False
    if os.environ.get(RANK_LOGS_ENV):
        _redirect_output(telemetry.run_dir() or ".", telemetry.rank())
    w.write(
        "proc_start",
        rank=telemetry.rank(),
        local_rank=_env_int("LOCAL_RANK", 0),
        world_size=_env_int("WORLD_SIZE", 1),
        restart=_env_int("TORCHELASTIC_RESTART_COUNT", 0),
        host=os.uname().nodename,
        argv=sys.argv,
    )
    _install_excepthook(w)
    frameworks.install()  # the metrics and totals the script's frameworks already log
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchWatcher())
    return True


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _redirect_output(run_dir: str, rank: int) -> None:
    logs = os.path.join(run_dir, "logs")
    os.makedirs(logs, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(logs, f"rank{rank}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _install_excepthook(w: EventWriter) -> None:
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        try:
            w.write(
                "exception",
                exc_type=f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins."),
                message=str(value)[:8000],
                traceback="".join(traceback.format_tb(tb)[-12:])[-8000:],
            )
        finally:
            previous(kind, value, tb)

    sys.excepthook = hook


class _TorchWatcher(importlib.abc.MetaPathFinder):
    """Runs ``_on_torch`` right after the script's ``import torch`` finishes."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)  # find the real torch with the other finders
        spec = importlib.util.find_spec("torch")
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            _on_torch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _on_torch(torch: ModuleType) -> None:
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        telemetry.note("torch has no global optimizer step hook here: no per-step memory samples")
        return
    recorder = StepRecorder(torch)
    register_optimizer_step_post_hook(recorder)
    _count_backward(torch, recorder)
    telemetry.event("torch", version=getattr(torch, "__version__", "?"))


def _count_backward(torch: ModuleType, recorder: StepRecorder) -> None:
    """Scripts that update weights by hand (``p.data.add_(p.grad, alpha=-lr)``) never step an optimizer:
    their backward passes are counted instead (``Tensor.backward`` calls ``torch.autograd.backward``)."""
    original = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        recorder.backward()
        return result

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    backward.__doc__ = original.__doc__
    torch.autograd.backward = backward


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

    Only the first optimizer that steps is counted, so a script with two
    optimizers (a GAN) still gets one sample per iteration. CUDA: one
    ``memory_stats_as_nested_dict`` call (no sync), then the peak is reset so each sample's
    peak is that step's; the host heap too. CPU: glibc's live heap bytes and RSS. A census of
    live tensors is taken when the run asks (``census.CensusTrigger``).
    """

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.first: int | None = None
        self.step = 0
        self.every = max(1, _env_int(STEP_EVERY_ENV, 1))
        rate = _env_int(STEP_RATE_ENV, STEP_RATE)
        # Past `rate` steps a second, a step is recorded once `gap` has passed: the cost of a run (disk,
        # the supervisor's fold) stops growing with its speed. The last step is always recorded (atexit).
        self.gap = 1.0 / rate if rate > 0 else 0.0
        self.last: float | None = None  # the first step's time includes start-up: no dt
        self.recorded = 0  # the step of the last step event
        self.backwards = 0
        self.by_backward = False  # steps are backward passes (no optimizer steps)
        atexit.register(self.flush)
        self.mallinfo2 = _mallinfo2()
        self.devices_seen: set[int] = set()
        self.page = os.sysconf("SC_PAGE_SIZE")
        try:
            self.statm: int | None = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.statm = None
        run_dir = telemetry.run_dir()
        self.census = CensusTrigger(run_dir, torch, STARTED_NS) if run_dir else None

    def backward(self) -> None:
        """A backward pass. Counted as the step only in a script whose optimizer never stepped in
        ``BACKWARD_STEPS`` of them (gradient accumulation steps an optimizer well before that)."""
        self.backwards += 1
        if not self.by_backward:
            if self.first is not None or self.backwards < BACKWARD_STEPS:
                return
            self.by_backward = True
            self.step = self.backwards - 1
            telemetry.note(
                f"no torch.optim optimizer stepped in {BACKWARD_STEPS} backward passes: a step is a backward()"
            )
        self._tick()

    def __call__(self, optimizer: object, args: object, kwargs: object) -> None:
        if self.by_backward:
            return
        if self.first is None:
            self.first = id(optimizer)
        elif id(optimizer) != self.first:
            return
        self._tick()

    def _tick(self) -> None:
        self.step += 1
        if self.step % self.every:
            return
        now = time.time()
        if self.last is not None and now - self.last < self.gap:
            return
        self.record(now)

    def flush(self) -> None:
        """At exit: the last step, if the rate limit skipped it (the step count stays exact)."""
        if self.step > self.recorded and self.step >= self.every:
            with contextlib.suppress(Exception):  # telemetry never fails a run, not even at exit
                self.record(time.time())

    def record(self, now: float) -> None:
        w = telemetry.writer()
        if w is None:
            return
        steps = self.step - self.recorded
        self.recorded = self.step
        dt = None if self.last is None else (now - self.last) / max(1, steps)  # per step, whatever was skipped
        self.last = now
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
            w.write(
                "step",
                step=self.step,
                dt=dt,
                dev=f"cuda:{index}",
                alloc=alloc.get("current", 0),
                reserved=reserved.get("current", 0),
                peak=alloc.get("peak", 0),
                heap=self._heap(),  # graphs kept alive grow the host, not the GPU
                rss=self._rss(),
            )
        else:
            w.write("step", step=self.step, dt=dt, dev="cpu", heap=self._heap(), rss=self._rss())
        if self.census is not None:
            self.census.at_step(self.step, now, w.write)

    def _device_event(self, w: EventWriter, index: int) -> None:
        """The device's size, once: the doctor projects when a growing rank fills it."""
        try:
            props = self.torch.cuda.get_device_properties(index)
            w.write("device", dev=f"cuda:{index}", name=str(props.name), total=int(props.total_memory))
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
