"""``GpumonCallback``: Ray Tune's trial events into gpumon's event stream (docs/events.md).

Ray 2.60 facts this respects: the Tuner pickles the RunConfig, so the open
writer is left out of the pickled state; hooks run in the driver's loop, so
each does a dict comprehension and one ``os.write``; ``on_trial_result``
sees the previous ``trial.last_result``, so the ``result`` argument is used;
configs from some searchers hold numpy scalars, which the encoder turns into
numbers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
    (``GPUMON_RUN_DIR``, set by ``gpumon launch``), else nothing is written.
    ``metric``/``mode``/``search_alg``/``scheduler`` label the experiment (Tune does
    not tell callbacks which it uses); ``space`` names the searched parameters.
    """

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
        self._write("tune_start", num_samples=total_num_samples or num_samples, stop=_plain(stop), **self.labels)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._write("trial_start", trial_id=trial.trial_id, config=trial.config)

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        metrics = {k: v for k, v in result.items() if k not in _BOOKKEEPING and type(v) in (int, float)}
        self._write(
            "trial_result",
            trial_id=trial.trial_id,
            iteration=result.get("training_iteration"),
            time_total_s=result.get("time_total_s"),
            trial_pid=result.get("pid"),
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
