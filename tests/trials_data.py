"""Recorded Ray Tune experiments: run directories with the Tune callback's events, as GpumonCallback writes them.

Shared by the Trials view's Pilot tests, its SVG snapshots and the core tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from gpumon.core.events import EventWriter
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import write_json

T0 = 1_795_000_000.0  # recorded runs have fixed times: nothing shown depends on the clock
DONE = "tune-1121-100000-a1b2"
LIVE = "tune-1121-110000-c3d4"
ERROR_TEXT = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 12, in train_digits\n'
    "    raise ValueError(f'lr {lr} diverged')\n"
    "ValueError: lr 0.3 diverged"
)


@dataclass
class RecordedTrial:
    id: str
    config: dict[str, Any]
    losses: list[float]
    status: str | None = None  # None: still running
    error: str | None = None
    pid: int = 4_000_000  # above pid_max: never a real process
    accuracy: list[float] = field(default_factory=list)


def done_trials() -> list[RecordedTrial]:
    def config(lr: float, batch: int, width: int) -> dict[str, Any]:
        return {"lr": lr, "batch_size": batch, "model": {"width": width}, "epochs": 10}

    return [
        RecordedTrial("a1b2c_00000", config(0.1, 32, 64), [0.9, 0.6, 0.4], "TERMINATED", pid=4_000_001),
        RecordedTrial("a1b2c_00001", config(0.01, 64, 128), [0.8, 0.5, 0.3, 0.25], "TERMINATED", pid=4_000_002),
        RecordedTrial("a1b2c_00002", config(0.3, 16, 32), [2.0], "ERROR", ERROR_TEXT, pid=4_000_003),
        RecordedTrial("a1b2c_00003", config(0.001, 128, 64), [0.95, 0.9], "TERMINATED", pid=4_000_004),
        RecordedTrial("a1b2c_00004", config(0.05, 32, 256), [0.7, 0.45, 0.35], "TERMINATED", pid=4_000_005),
        RecordedTrial(
            "a1b2c_00005", config(0.2, 8, 32), [], "ERROR", "RuntimeError: CUDA out of memory", pid=4_000_006
        ),
    ]


def live_trials() -> list[RecordedTrial]:
    return [
        RecordedTrial("f00d1_00000", {"lr": 0.02, "batch_size": 32}, [0.9, 0.7, 0.5], "TERMINATED"),
        RecordedTrial("f00d1_00001", {"lr": 0.04, "batch_size": 64}, [0.85, 0.6], pid=5_000_000),  # GPU 0's process
        RecordedTrial("f00d1_00002", {"lr": 0.08, "batch_size": 16}, [1.1]),
    ]


def write_results(writer: EventWriter, trial: RecordedTrial, start: int = 0) -> None:
    for i, loss in enumerate(trial.losses[start:], start=start + 1):
        metrics = {"loss": loss, "acc": 1.0 - loss / 2}
        writer.write(
            "trial_result", trial_id=trial.id, iteration=i, time_total_s=10.0 * i, trial_pid=trial.pid, metrics=metrics
        )


def record_experiment(
    home: Path,
    run_id: str,
    trials: list[RecordedTrial],
    live: bool = False,
    num_samples: int = 6,
    metric: str | None = "loss",
    space: tuple[str, ...] | None = ("batch_size", "lr", "model"),
) -> Path:
    """A run of kind tune: spec, status (finished, or running with this process as its supervisor), events."""
    run_dir = home / "runs" / run_id
    (run_dir / "logs").mkdir(parents=True)
    write_json(run_dir / "spec.json", RunSpec("tune", search="digits-asha.toml", cwd="/tmp").to_dict())
    if live:
        me = psutil.Process()
        now = time.time()
        status = {"state": "running", "created": T0 + 3600, "started": now - 60, "pid": me.pid}
        status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
    else:
        status = {"state": "finished", "created": T0, "started": T0 + 1, "ended": T0 + 200, "exit_code": 0}
    write_json(run_dir / "status.json", status)
    writer = EventWriter(run_dir, "tune")
    labels = {"metric": metric, "mode": "min" if metric else None, "search_alg": "optuna", "scheduler": "asha"}
    writer.write("tune_start", num_samples=num_samples, space=list(space) if space else None, **labels)
    for trial in trials:
        writer.write("trial_start", trial_id=trial.id, config=trial.config)
        write_results(writer, trial)
        if trial.status is not None:
            writer.write("trial_end", trial_id=trial.id, status=trial.status, error=trial.error)
    if not live:
        writer.write("tune_end", trials=len(trials), statuses={})
    writer.close()
    return run_dir


def record_done(home: Path) -> Path:
    return record_experiment(home, DONE, done_trials())


def record_live(home: Path) -> Path:
    return record_experiment(home, LIVE, live_trials(), live=True, num_samples=8, space=("batch_size", "lr"))
