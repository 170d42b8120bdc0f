"""``GpumonCallback``: Ray Tune's trial events into gpumon's event stream (docs/events.md).

Ray 2.60 facts this respects: the Tuner pickles the RunConfig, so the open
writer is left out of the pickled state; hooks run in the driver's loop, so
each does a dict comprehension and one ``os.write``; ``on_trial_result``
sees the previous ``trial.last_result``, so the ``result`` argument is used;
configs from some searchers hold numpy scalars, which the encoder turns into
numbers.
"""

from __future__ import annotations

import numbers
import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar

from ray.tune import Callback

from gpumon import telemetry
from gpumon.core.events import EventWriter

# Bookkeeping keys of every Tune result: kept out of a trial's metrics.
_BOOKKEEPING = frozenset(
    {
        "trial_id", "experiment_id", "date", "timestamp", "time_this_iter_s", "time_total_s", "pid",
        "hostname", "node_ip", "config", "time_since_restore", "iterations_since_restore",
        "training_iteration", "done", "should_checkpoint", "checkpoint_dir_name", "experiment_tag",
    }
)  # fmt: skip


class GpumonCallback(Callback):
    """Writes ``tune_start``, ``trial_start``, ``trial_result``, ``trial_end`` and ``tune_end`` events.

    ``run_dir``: where to write; by default the gpumon run this process belongs to
    (``GPUMON_RUN_DIR``, set by ``gpumon launch``), else a run registered for this driver
    (``gpumon.core.runs.reading.external``; ``GPUMON_TUNE_EXTERNAL=0`` turns that off).
    ``metric``/``mode``/``search_alg``/``scheduler`` label the experiment (Tune does
    not tell callbacks which it uses); ``space`` names the searched parameters.
    """

    _active: ClassVar[dict[str, int]] = {}  # run dir -> id of the instance writing it (one per driver process)
    _external: ClassVar[str | None] = None  # the run this driver registered, when gpumon did not start it

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        search_alg: str | None = None,
        scheduler: str | None = None,
        space: list[str] | None = None,
    ) -> None:
        self.run_dir = os.fspath(run_dir) if run_dir is not None else telemetry.run_dir()
        self.labels = {"metric": metric, "mode": mode, "search_alg": search_alg, "scheduler": scheduler, "space": space}
        self._writer: EventWriter | None = None
        self._writer_pid: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_writer"] = None  # an open file does not pickle; reopened where it is used
        state["_writer_pid"] = None
        return state

    def _write(self, kind: str, **fields: Any) -> None:
        if self.run_dir is None:
            return
        if self._writer is None or self._writer_pid != os.getpid():
            try:
                self._writer = EventWriter(self.run_dir, "tune")
            except OSError:
                self.run_dir = None  # say nothing rather than fail the experiment
                return
            self._writer_pid = os.getpid()
        self._writer.write(kind, **fields)

    # -- Tune's hooks ---------------------------------------------------------
    def setup(
        self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None, **info: Any
    ) -> None:
        if self.run_dir is None:  # a driver gpumon did not start: it becomes a gpumon run (docs/tune.md)
            if GpumonCallback._external is None:
                from gpumon.core.runs.reading.external import register_external

                registered = register_external("tune")
                GpumonCallback._external = os.fspath(registered) if registered is not None else None
            self.run_dir = GpumonCallback._external
        if self.run_dir is not None:
            # The script's own GpumonCallback and the one RAY_TUNE_CALLBACKS adds: the first set up writes.
            owner = GpumonCallback._active.setdefault(self.run_dir, id(self))
            if owner != id(self):
                self.run_dir = None
                return
        labels = dict(self.labels)
        found = _controller_labels()
        for key in ("metric", "mode", "search_alg", "scheduler"):
            if labels[key] is None and found.get(key):
                labels[key] = found[key]
        self._write("tune_start", num_samples=total_num_samples or num_samples, stop=_plain(stop), **labels)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._write("trial_start", trial_id=trial.trial_id, config=trial.config)

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        metrics = {k: _number(v) for k, v in result.items() if k not in _BOOKKEEPING and _is_number(v)}
        self._write(
            "trial_result",
            trial_id=trial.trial_id,
            iteration=result.get("training_iteration"),
            time_total_s=result.get("time_total_s"),
            trial_pid=result.get("pid"),
            trial_hostname=result.get("hostname"),
            trial_node_ip=result.get("node_ip"),
            metrics=metrics,
        )

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._write("trial_end", trial_id=trial.trial_id, status="TERMINATED")

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._write("trial_end", trial_id=trial.trial_id, status="ERROR", error=_error_text(trial))

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        counts: dict[str, int] = {}
        for trial in trials:
            status = str(trial.status)
            counts[status] = counts.get(status, 0) + 1
            if status not in ("TERMINATED", "ERROR"):  # cut short by a time budget or a stop: no hook said so
                self._write("trial_end", trial_id=trial.trial_id, status=status)
        self._write("tune_end", trials=len(trials), statuses=counts)


def _is_number(value: Any) -> bool:
    """int, float and numpy's scalars (np.float32, np.int64, ...: what many trainables report); not bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and getattr(value, "ndim", 0) == 0


def _number(value: Any) -> int | float:
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _controller_labels() -> dict[str, str]:
    """The metric and mode the experiment really uses (TuneConfig's, else the searcher's or scheduler's),
    and which searcher and scheduler it runs.

    Tune hands callbacks neither, so they are read from the callers of ``setup`` (Ray 2.60): the
    TuneController (its metric, its searcher and scheduler) and ``tune.run``, whose ``metric``/``mode``
    arguments are what TuneConfig gave. Nothing found: the header says the metric is unknown.
    """
    found: dict[str, str] = {}
    frame: FrameType | None = sys._getframe(1)
    for _ in range(16):
        if frame is None:
            break
        local = frame.f_locals
        owner = local.get("self")
        if owner is not None and hasattr(owner, "_search_alg") and hasattr(owner, "_scheduler_alg"):
            searcher = getattr(owner._search_alg, "searcher", None)
            found.setdefault("search_alg", type(searcher or owner._search_alg).__name__)  # e.g. OptunaSearch
            found.setdefault("scheduler", type(owner._scheduler_alg).__name__)  # e.g. AsyncHyperBandScheduler
            for source in (owner, owner._scheduler_alg, searcher):
                _take(found, getattr(source, "_metric", None), getattr(source, "_mode", None))
        if frame.f_code.co_name == "run" and "experiments" in local:  # tune.run(metric=..., mode=...)
            _take(found, local.get("metric"), local.get("mode"))
        frame = frame.f_back
    return found


def _take(found: dict[str, str], metric: Any, mode: Any) -> None:
    if isinstance(metric, str) and metric and not metric.startswith("_") and "metric" not in found:
        found["metric"] = metric  # not Tune's anonymous "_metric"
    if mode in ("min", "max") and "mode" not in found:
        found["mode"] = mode


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, dict | int | float | str) else repr(value)


def _error_text(trial: Any) -> str:
    """The trial's error as Tune wrote it (last 4000 characters), or what is known."""
    path = getattr(trial, "error_file", None)
    if path:
        try:
            return Path(path).read_text(errors="replace")[-4000:]
        except OSError:
            pass
    return str(getattr(trial, "error_msg", None) or "the trial failed (no error text was saved)")
