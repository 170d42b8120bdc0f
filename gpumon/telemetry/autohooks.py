"""Per-step memory samples, the loss and exception records for any Python training script.

The bootstrap (``bootstrap/sitecustomize.py``) calls ``install()`` at start-up in
every Python process of a run. Nothing here imports torch: a finder waits for the
script's own ``import torch`` and then registers torch's global optimizer step
post-hook and wraps ``torch.autograd.backward``, so a script that never imports
torch pays nothing. A process becomes a rank when it first steps (``steps``), so
DataLoader workers, launchers and other helpers write nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from gpumon import telemetry
from gpumon.core.events import EventWriter
from gpumon.core.safefs import open_own, private_dirs
from gpumon.telemetry import collectives, frameworks, phases, ranks, stacks
from gpumon.telemetry.feeding import hook_clip, hook_dataloader
from gpumon.telemetry.imports import when_imported
from gpumon.telemetry.loss import hook_scaler
from gpumon.telemetry.steps import StepRecorder, torch_import

__all__ = ["StepRecorder", "install"]

TORCHRUN_ENV = "GPUMON_TORCHRUN"  # the run's main process is torchrun (whose agent is not a rank)
RANK_LOGS_ENV = "GPUMON_RANK_LOGS"  # send each rank's stdout/stderr to logs/rank<N>.log
FIRST_ENV = "GPUMON_INSTRUMENTED_PID"  # the run's first instrumented process; its children see its pid
MAIN_SOURCE = "main"  # the exceptions of a first process that never became a rank (e.g. mp.spawn's parent)


def install() -> bool:
    """Put the lazy hooks in this process of a gpumon run; True when it did. A process writes nothing until
    it steps, except torchrun's ranks, which are ranks from their start (their own log, ``proc_start``)."""
    if not telemetry.enabled():
        return False
    if os.environ.get(TORCHRUN_ENV) and "RANK" not in os.environ:
        return False  # torchrun's agent: its output is the launcher log, its children are the ranks
    first = FIRST_ENV not in os.environ  # not a child of an instrumented process
    os.environ[FIRST_ENV] = str(os.getpid())
    if first and os.environ.get(TORCHRUN_ENV):
        if os.environ.get(RANK_LOGS_ENV):
            _redirect_output(telemetry.run_dir() or ".", telemetry.rank())
        telemetry.writer()  # proc_start now: the GPU view ties the rank's pid to the run before it steps
    _install_excepthook(first)
    with contextlib.suppress(OSError, RuntimeError, ValueError):  # every thread's stack on SIGUSR2 (a stall)
        stacks.install(telemetry.run_dir())
    frameworks.install()  # the metrics and totals the script's frameworks already log
    # After the script's own import: a probe (importlib.util.find_spec("torch"), as transformers, datasets
    # and evaluate do first) imports nothing and must not use the watch up.
    when_imported("torch", _on_torch)
    return True


def _redirect_output(run_dir: str, rank: int) -> None:
    from gpumon.core.runs.supervision.output import PIPES_ENV, open_rank_pipe

    fd = None
    if os.environ.get(PIPES_ENV):  # the supervisor drains it: a full state dir never fails a print()
        fd = open_rank_pipe(run_dir, int(os.environ.get("LOCAL_RANK", rank)), rank)
    if fd is None:
        logs = os.path.join(run_dir, "logs")
        private_dirs(logs)
        fd = open_own(Path(logs, f"rank{rank}.log"), os.O_WRONLY | os.O_APPEND)  # never through a planted link
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _exception_writer(first: bool) -> EventWriter | None:
    """A rank's own file; the run's first process's ``main`` file when it never stepped; helpers: none."""
    if ranks.decided() is not None:
        return telemetry.writer()
    directory = telemetry.run_dir()
    if not first or directory is None or os.environ.get(FIRST_ENV) != str(os.getpid()):
        return None
    try:
        return EventWriter(directory, MAIN_SOURCE)
    except OSError:
        return None


def _install_excepthook(first: bool) -> None:
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        try:
            w = _exception_writer(first)
            if w is None:
                return
            w.write(
                "exception",
                exc_type=f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins."),
                message=str(value)[:8000],
                traceback="".join(traceback.format_tb(tb)[-12:])[-8000:],
            )
        finally:
            previous(kind, value, tb)

    sys.excepthook = hook


def _on_torch(torch: ModuleType) -> None:
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        telemetry.note("torch has no global optimizer step hook here: no per-step memory samples")
        return
    recorder = StepRecorder(torch)
    register_optimizer_step_post_hook(recorder)
    _count_backward(torch, recorder)
    hook_scaler(torch, recorder.scaled, recorder.updated)
    hook_dataloader(torch, lambda: recorder.feed)
    hook_clip(torch, recorder.clipped)
    phases.hook(torch)  # eval and checkpoint pauses: the stall rule waits longer through them
    ranks.hook_group(torch, recorder.group)
    collectives.hook(torch, recorder.clock)
    if ranks.decided() is not None:  # a torchrun rank, or one that already reported
        recorder.told_torch = True
        telemetry.event("torch", version=getattr(torch, "__version__", "?"), **torch_import())


def _count_backward(torch: ModuleType, recorder: StepRecorder) -> None:
    """The tensor a backward starts from is the loss (``loss``); and scripts that update weights by hand
    (``p.data.add_(p.grad, alpha=-lr)``) never step an optimizer: their backward passes are counted
    instead (``Tensor.backward`` calls ``torch.autograd.backward``)."""
    original = torch.autograd.backward

    clock = recorder.clock

    def backward(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = original(*args, **kwargs)
        clock.backward_s += time.perf_counter() - start  # DDP waits for its peers in here (collectives.py)
        recorder.backward(args, kwargs)
        return result

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    backward.__doc__ = original.__doc__
    torch.autograd.backward = backward
