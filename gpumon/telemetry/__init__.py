"""Telemetry a training program reports to gpumon.

    from gpumon import telemetry
    telemetry.plan(steps=epochs * len(loader))  # optional: lets the doctor judge memory growth
    telemetry.log(step=i, loss=loss.item(), samples_per_s=rate)

Under a gpumon run (``GPUMON_RUN_DIR`` set by the launcher) each call appends
one event to this rank's event file; anywhere else every call is a no-op.
Importing this module never imports torch or Textual. Values must be Python
numbers (``loss.item()``): a tensor here would keep its graph alive or force
a device sync on every call.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gpumon.core.events import RUN_DIR_ENV, EventWriter
from gpumon.telemetry import ranks
from gpumon.telemetry.rate import MetricsLimit

RUN_ID_ENV = "GPUMON_RUN_ID"

_writer: EventWriter | None = None
_writer_pid: int | None = None
_configured: tuple[str, str] | None = None
_loss_logged: int | None = None  # the pid whose script reported its own loss
_limit: MetricsLimit | None = None
_steps: Callable[[], int] | None = None  # the step hook's count in this process (steps.py), once torch is in
_flush_steps: Callable[[], None] | None = None  # records the step hook's last step now (steps.py)


def rank() -> int:
    """This process's rank: its process group's rank, else ``RANK``/``LOCAL_RANK``, else a free index of
    the run (claimed on first use, see ``ranks``); 0 outside distributed runs. The same number names its
    event source (``rank<N>``)."""
    return ranks.current(run_dir() if _configured is None else None)


def run_dir() -> str | None:
    """The run directory this process reports to, or None when not under gpumon."""
    if _configured is not None:
        return _configured[0]
    return os.environ.get(RUN_DIR_ENV) or None


def enabled() -> bool:
    return run_dir() is not None


def configure(directory: str | os.PathLike[str] | None, source: str | None = None) -> None:
    """Report to ``directory`` as ``source`` (default ``rank<RANK>``); None goes back to the environment."""
    global _configured
    _close()
    _configured = None if directory is None else (os.fspath(directory), source or f"rank{ranks.current(None)}")


def writer() -> EventWriter | None:
    """This process's event writer, opened on first use (and again after a fork)."""
    global _writer, _writer_pid
    if _writer is not None and _writer_pid == os.getpid():
        return _writer
    directory = run_dir()
    if directory is None:
        return None
    source = _configured[1] if _configured else f"rank{rank()}"
    try:
        _writer = EventWriter(directory, source)
    except OSError:
        return None
    _writer_pid = os.getpid()
    if _configured is None:
        ranks.announce(_writer)  # a process becomes a rank when it first reports: proc_start opens its file
    return _writer


def event(kind: str, **fields: Any) -> None:
    """Append a raw protocol event of type ``kind`` (see docs/events.md)."""
    w = writer()
    if w is not None:
        w.write(kind, **fields)


def log(step: int | None = None, **metrics: float) -> None:
    """Report metrics (floats) for ``step``: loss, accuracy, samples_per_s, lr, ..."""
    global _loss_logged
    if "loss" in metrics:
        _loss_logged = os.getpid()
    global _limit
    if writer() is None:
        return
    if _limit is None:
        _limit = MetricsLimit(_write_metrics)
    _limit.add(step, metrics)  # at most at the step rate: a flood of log() calls costs no disk


def _write_metrics(step: int | None, metrics: dict[str, Any]) -> None:
    w = writer()
    if w is not None:
        w.write("metrics", step=step, metrics=metrics)


def plan(steps: int, done: int = 0) -> None:
    """How many optimizer steps this process will take from its start (epochs x batches, less any resumed);
    ``done``: the job's steps before this process began (a run resumed from a checkpoint at step ``done``), so
    that its progress, ETA and step are the job's.

    The doctor raises a memory alarm only when memory would run out before the run ends: with a
    plan that end is known; without one it assumes 24 hours at the run's current pace.
    """
    w = writer()
    if w is not None and type(steps) is int and steps > 0:
        w.write("plan", steps=steps, done=done if type(done) is int and done > 0 else 0)


def count_steps(counter: Callable[[], int], flush: Callable[[], None] | None = None) -> None:
    """The step hook's count of this process's optimizer steps (steps.py): framework hooks write it beside their
    own count, so a reader sees whether that count moves one for one with the steps (its unit). ``flush``
    records the last step now, where the rate limit held it back."""
    global _steps, _flush_steps
    _steps, _flush_steps = counter, flush


def flush_steps() -> None:
    """Record this process's last step now: a framework whose workers end without running ``atexit`` (Ray
    Train's) calls it at each report, so the run's step count ends exact."""
    if _flush_steps is not None:
        _flush_steps()


def steps_taken() -> int | None:
    """This process's optimizer steps so far; None before torch is imported."""
    return _steps() if _steps is not None else None


def loss_logged() -> bool:
    """This process's script reports its own loss (``log(loss=...)``): gpumon's own reading stands aside."""
    return _loss_logged == os.getpid()


def note(text: str, **fields: Any) -> None:
    """A line a person should see beside the run (e.g. "DataParallel: 1 GPU, running the plain model")."""
    w = writer()
    if w is not None:
        w.write("note", text=text, **fields)


def reopen() -> None:
    """The next ``writer()`` opens a new file: this process's rank changed (see ``ranks.recheck``)."""
    _close()


def _close() -> None:
    global _writer, _writer_pid, _limit
    if _limit is not None:  # metrics the rate held back go to the file they were logged for
        _limit.flush()
        _limit = None
    if _writer is not None and _writer_pid == os.getpid():
        _writer.close()
    _writer = None
    _writer_pid = None
