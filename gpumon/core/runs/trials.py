"""A Ray Tune experiment as its events describe it: the trial table's data (no ray import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumon.core.runs.series import Series

TUNE_EVENTS = frozenset({"tune_start", "trial_start", "trial_result", "trial_end", "tune_end"})


@dataclass
class Trial:
    id: str
    status: str = "RUNNING"
    config: dict[str, Any] = field(default_factory=dict)
    iteration: int | None = None
    time_total_s: float | None = None
    pid: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # latest
    curve: Series = field(default_factory=Series)  # the experiment's metric per iteration
    best: float | None = None  # this trial's best value of the experiment's metric
    error: str | None = None


@dataclass
class Experiment:
    metric: str | None = None
    mode: str | None = None
    search_alg: str | None = None
    scheduler: str | None = None
    num_samples: int | None = None
    ended: bool = False
    trials: dict[str, Trial] = field(default_factory=dict)

    @property
    def done(self) -> int:
        return sum(1 for t in self.trials.values() if t.status in ("TERMINATED", "ERROR"))

    def best_trial(self) -> Trial | None:
        scored = [t for t in self.trials.values() if t.best is not None]
        if not scored:
            return None
        pick = min if self.mode == "min" else max
        return pick(scored, key=lambda t: t.best or 0.0)

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "tune_start":
            for key in ("metric", "mode", "search_alg", "scheduler", "num_samples"):
                if event.get(key) is not None:
                    setattr(self, key, event[key])
            return
        if kind == "tune_end":
            self.ended = True
            return
        trial_id = event.get("trial_id")
        if not isinstance(trial_id, str):
            return
        trial = self.trials.setdefault(trial_id, Trial(trial_id))
        if kind == "trial_start":
            trial.status = "RUNNING"
            if isinstance(event.get("config"), dict):
                trial.config = event["config"]
        elif kind == "trial_result":
            self._result(trial, event)
        elif kind == "trial_end":
            trial.status = str(event.get("status", "TERMINATED"))
            if event.get("error"):
                trial.error = str(event["error"])

    def _result(self, trial: Trial, event: dict[str, Any]) -> None:
        if isinstance(event.get("iteration"), int):
            trial.iteration = event["iteration"]
        if isinstance(event.get("time_total_s"), int | float):
            trial.time_total_s = float(event["time_total_s"])
        if isinstance(event.get("trial_pid"), int):
            trial.pid = event["trial_pid"]
        metrics = event.get("metrics")
        if not isinstance(metrics, dict):
            return
        trial.metrics.update({k: float(v) for k, v in metrics.items() if isinstance(v, int | float)})
        value = trial.metrics.get(self.metric or "")
        if value is None:
            return
        trial.curve.add(trial.iteration or len(trial.curve) + 1, value)
        better = trial.best is None or (value < trial.best if self.mode == "min" else value > trial.best)
        if better:
            trial.best = value

    def to_dict(self) -> dict[str, Any]:
        best = self.best_trial()
        return {
            "metric": self.metric,
            "mode": self.mode,
            "search_alg": self.search_alg,
            "scheduler": self.scheduler,
            "num_samples": self.num_samples,
            "done": self.done,
            "ended": self.ended,
            "best_trial": best.id if best else None,
            "trials": [
                {
                    "id": t.id,
                    "status": t.status,
                    "config": t.config,
                    "iteration": t.iteration,
                    "time_total_s": t.time_total_s,
                    "pid": t.pid,
                    "metrics": t.metrics,
                    "best": t.best,
                    "error": t.error,
                }
                for t in self.trials.values()
            ],
        }
