"""A Ray Tune experiment as its events describe it: the trial table's data (no ray import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumon.core.runs.reading.series import Series

TUNE_EVENTS = frozenset({"tune_start", "trial_start", "trial_result", "trial_end", "tune_end"})
ACTIVE = ("RUNNING", "PENDING", "PAUSED")  # a trial that has not ended
LOST = "LOST"  # an active trial of a run that ended without saying how the trial did
#: A trial stopped before it finished: one Tune ended after the user asked it to stop (x, X, gpumon stop
#: [--trial], whose requests are in control/), or one still active when the search ended (a stop, a time budget).
STOPPED = "STOPPED"


def over_status(ended: bool, live: bool) -> str | None:
    """What a trial Tune left active reads once its search ended (STOPPED) or its run died (LOST); None while
    the search goes on. The Trials view and ``gpumon trials`` both show trials through this."""
    return STOPPED if ended else LOST if not live else None


def shown_status(status: str, over: str | None) -> str:
    return over if over is not None and status in ACTIVE else status


def trial_status(trial: Trial, over: str | None, stops: frozenset[str], stop_all_at: float | None) -> str:
    """What a trial reads in the Trials view and ``gpumon trials``: Tune's status, except STOPPED for one Tune
    terminated after the user asked it (``stops``: the trials asked by id; ``stop_all_at``: when the whole search
    was asked, so a trial that ended before then still reads TERMINATED), and ``over`` for one left active."""
    if trial.status == "TERMINATED":
        asked = trial.id in stops or (stop_all_at is not None and (trial.ended_at or 0.0) >= stop_all_at)
        return STOPPED if asked else trial.status
    return shown_status(trial.status, over)


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys: {"model": {"width": 64}} -> {"model.width": 64}."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


@dataclass
class Trial:
    id: str
    status: str = "RUNNING"
    config: dict[str, Any] = field(default_factory=dict)
    iteration: int | None = None
    time_total_s: float | None = None
    pid: int | None = None
    hostname: str | None = None  # the node the trial's worker runs on, as Tune names it
    node_ip: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # latest
    curve: Series = field(default_factory=Series)  # the experiment's metric per iteration
    best: float | None = None  # this trial's best value of the experiment's metric
    error: str | None = None
    ended_at: float | None = None  # the time of Tune's end event for it
    history: dict[str, Series] = field(default_factory=dict)  # every metric per iteration (curve is one)
    results: int = 0
    revision: int = 0  # bumped by every event of this trial: views rebuild only changed rows


@dataclass
class Experiment:
    metric: str | None = None
    mode: str | None = None
    search_alg: str | None = None
    scheduler: str | None = None
    num_samples: int | None = None
    space: tuple[str, ...] | None = None  # the searched parameters' names, when the writer knows them
    ended: bool = False
    trials: dict[str, Trial] = field(default_factory=dict)
    revision: int = 0  # bumped by every event

    @property
    def done(self) -> int:
        return sum(1 for t in self.trials.values() if t.status in ("TERMINATED", "ERROR"))

    scope = "last"  # as Tune's get_best_result() by default: each trial's last result, not its best ever

    def best_trial(self) -> Trial | None:
        """The trial Tune would call best (scope "last"): the best last value of the metric."""
        metric = self.metric or ""
        scored = [t for t in self.trials.values() if metric in t.metrics]
        if not scored:
            return None
        pick = min if self.mode == "min" else max
        return pick(scored, key=lambda t: t.metrics[metric])

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        self.revision += 1
        if kind == "tune_start":
            for key in ("metric", "mode", "search_alg", "scheduler", "num_samples"):
                if event.get(key) is not None:
                    setattr(self, key, event[key])
            space = event.get("space")
            if isinstance(space, list) and all(isinstance(name, str) for name in space):
                self.space = tuple(space)
            return
        if kind == "tune_end":
            self.ended = True
            return
        trial_id = event.get("trial_id")
        if not isinstance(trial_id, str):
            return
        trial = self.trials.get(trial_id)
        if trial is None:
            trial = self.trials[trial_id] = Trial(trial_id)
        trial.revision += 1
        if kind == "trial_start":
            trial.status = "RUNNING"
            if isinstance(event.get("config"), dict):
                trial.config = event["config"]
        elif kind == "trial_result":
            self._result(trial, event)
        elif kind == "trial_end":
            trial.status = str(event.get("status", "TERMINATED"))
            if isinstance(event.get("t"), int | float):
                trial.ended_at = float(event["t"])
            if event.get("error"):
                trial.error = str(event["error"])

    def _result(self, trial: Trial, event: dict[str, Any]) -> None:
        if isinstance(event.get("iteration"), int):
            trial.iteration = event["iteration"]
        if isinstance(event.get("time_total_s"), int | float):
            trial.time_total_s = float(event["time_total_s"])
        if isinstance(event.get("trial_pid"), int):
            trial.pid = event["trial_pid"]
        if isinstance(event.get("trial_hostname"), str):
            trial.hostname = event["trial_hostname"]
        if isinstance(event.get("trial_node_ip"), str):
            trial.node_ip = event["trial_node_ip"]
        metrics = event.get("metrics")
        if not isinstance(metrics, dict):
            return
        trial.results += 1
        numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        trial.metrics.update(numbers)
        step = trial.iteration or trial.results
        for key, number in numbers.items():
            series = trial.history.get(key)
            if series is None:  # the experiment's metric shares its series with curve
                series = trial.history[key] = trial.curve if key == self.metric else Series()
            series.add(step, number)
        value = numbers.get(self.metric or "")
        if value is None:
            return
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
            "space": list(self.space) if self.space is not None else None,
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
                    "hostname": t.hostname,
                    "node_ip": t.node_ip,
                    "metrics": t.metrics,
                    "best": t.best,
                    "error": t.error,
                }
                for t in self.trials.values()
            ],
        }
