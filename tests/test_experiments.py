"""The core of the Trials view: experiments found in the state dir, folded from Tune events, as frozen snapshots."""

from __future__ import annotations

from pathlib import Path

from gpumon.core.events import EventWriter
from gpumon.core.runs.reading.experiments import ExperimentsMonitor
from gpumon.core.runs.reading.trials import LOST, STOPPED, Experiment, flatten
from gpumon.core.runs.record.store import RunStore, read_json, write_json
from tests.test_runs_view import FINISHED, record_runs
from tests.trials_data import DONE, LIVE, live_trials, record_done, record_experiment, record_live


def test_flatten_nested_configs_with_dots() -> None:
    config = {"lr": 0.1, "model": {"width": 64, "act": {"name": "relu"}}, "empty": {}, "layers": [1, 2]}
    assert flatten(config) == {"lr": 0.1, "model.width": 64, "model.act.name": "relu", "empty": {}, "layers": [1, 2]}


def test_only_runs_with_tune_events_are_experiments_newest_first(tmp_path: Path) -> None:
    record_runs(tmp_path, live=False)  # three plain training runs
    record_done(tmp_path)
    record_live(tmp_path)
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    infos = monitor.refresh()
    assert [i.run_id for i in infos] == [LIVE, DONE]
    done = infos[1]
    assert (done.state, done.kind, done.label, done.search_alg, done.scheduler) == (
        "finished",
        "tune",
        "digits-asha",
        "optuna",
        "asha",
    )
    assert (done.trials, done.done, done.errors, done.running, done.num_samples) == (6, 6, 2, 0, 6)
    assert (done.best_id, done.best, done.ended) == ("a1b2c_00001", 0.25, True)
    assert infos[0].live and infos[0].running == 2
    assert FINISHED in monitor._plain  # an ended run without Tune events is not looked at again
    assert monitor.snapshot(FINISHED) is None


def test_snapshot_rows_change_only_for_trials_with_new_events(tmp_path: Path) -> None:
    run_dir = record_live(tmp_path)
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    monitor.refresh()
    first = monitor.snapshot(LIVE)
    assert first is not None and first.curves is None
    monitor.refresh()
    assert monitor.snapshot(LIVE) is first  # nothing new: the same object, the view skips it at once
    writer = EventWriter(run_dir, "tune")
    writer.write(
        "trial_result", trial_id="f00d1_00002", iteration=2, time_total_s=20.0, trial_pid=7, metrics={"loss": 0.3}
    )
    writer.close()
    monitor.refresh()
    second = monitor.snapshot(LIVE, "f00d1_00002")
    assert second is not None and second is not first
    changed = [a.id for a, b in zip(first.trials, second.trials, strict=True) if a is not b]
    assert changed == ["f00d1_00002"]
    row = second.by_id["f00d1_00002"]
    assert (row.iteration, row.time_total_s, row.pid, row.metrics["loss"], row.best) == (2, 20.0, 7, 0.3, 0.3)
    assert second.info.best_id == "f00d1_00002"
    assert second.curves is not None and second.curves.curves["loss"] == ((1, 2), (1.1, 0.3))
    assert monitor.snapshot(LIVE, "f00d1_00002") is second  # the same curves: still the same object


def test_params_are_the_searched_space_and_metrics_start_with_the_experiments(tmp_path: Path) -> None:
    record_done(tmp_path)
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    monitor.refresh()
    snap = monitor.snapshot(DONE)
    assert snap is not None
    assert snap.params == ("batch_size", "lr", "model.width")  # 'epochs' is a constant of the config
    assert snap.metrics == ("loss", "acc")
    assert snap.by_id["a1b2c_00002"].error is not None and "lr 0.3 diverged" in snap.by_id["a1b2c_00002"].error


def test_without_a_space_or_a_metric_every_config_key_is_a_column(tmp_path: Path) -> None:
    trials = live_trials()
    trials[0].config["model"] = {"width": 8}
    record_experiment(tmp_path, "tune-1121-120000-eeee", trials, metric=None, space=None)
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    monitor.refresh()
    snap = monitor.snapshot("tune-1121-120000-eeee")
    assert snap is not None and snap.info.metric is None and snap.info.best_id is None
    assert snap.params == ("batch_size", "lr", "model.width")
    assert snap.metrics == ("acc", "loss")
    from gpumon.tui.views.trials.trial_detail import header_text

    said = header_text(snap).plain  # the metric is the experiment's (TuneConfig), not a callback's argument
    assert "no best trial: the experiment names no metric (TuneConfig(metric=..., mode=...))" in said
    assert "GpumonCallback" not in said


def test_active_trials_of_a_run_that_died_read_lost(tmp_path: Path) -> None:
    run_dir = record_live(tmp_path)
    status = read_json(run_dir / "status.json")
    status.update(state="failed", ended=status["started"] + 5, exit_code=1)
    write_json(run_dir / "status.json", status)  # ended without tune_end nor the trials' ends
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    monitor.refresh()
    snap = monitor.snapshot(LIVE)
    assert snap is not None and snap.info.state == "failed"
    assert [r.status for r in snap.trials] == ["TERMINATED", LOST, LOST]


def test_stop_requests_mark_active_trials_stopping(tmp_path: Path) -> None:
    from gpumon.core.runs.supervision.control import request_stop_experiment, request_stop_trial

    run_dir = record_live(tmp_path)
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    request_stop_trial(run_dir, "f00d1_00001")
    request_stop_trial(run_dir, "f00d1_00000")  # ended already: not stopping
    monitor.refresh()
    snap = monitor.snapshot(LIVE)
    assert snap is not None and [r.stopping for r in snap.trials] == [False, True, False]
    request_stop_experiment(run_dir)
    monitor.refresh()
    snap = monitor.snapshot(LIVE)
    assert snap is not None and snap.info.stop_requested and [r.stopping for r in snap.trials] == [False, True, True]


def test_a_trial_tune_ended_at_the_users_request_reads_stopped_not_terminated(tmp_path: Path) -> None:
    from gpumon.core.runs.supervision.control import request_stop_experiment, request_stop_trial

    run_dir = record_live(tmp_path)  # f00d1_00000 finished by itself; 00001 and 00002 run
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    request_stop_trial(run_dir, "f00d1_00001")  # x
    writer = EventWriter(run_dir, "tune")
    writer.write("trial_end", trial_id="f00d1_00001", status="TERMINATED")  # what Tune says of it
    monitor.refresh()
    snap = monitor.snapshot(LIVE)
    assert snap is not None and [r.status for r in snap.trials] == ["TERMINATED", STOPPED, "RUNNING"]
    request_stop_experiment(run_dir)  # X: the trials Tune ends from now on were stopped too
    writer.write("trial_end", trial_id="f00d1_00002", status="TERMINATED")
    writer.close()
    monitor.refresh()
    snap = monitor.snapshot(LIVE)
    assert snap is not None and [r.status for r in snap.trials] == ["TERMINATED", STOPPED, STOPPED]
    fresh = ExperimentsMonitor(RunStore(tmp_path))  # an app opened later reads the requests too
    fresh.refresh()
    again = fresh.snapshot(LIVE)
    assert again is not None and [r.status for r in again.trials] == ["TERMINATED", STOPPED, STOPPED]


def test_gpumon_trials_says_stopped_for_a_trial_the_user_stopped(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    from gpumon.core.runs.supervision.control import request_stop_trial

    run_dir = record_live(tmp_path)
    request_stop_trial(run_dir, "f00d1_00001")  # gpumon stop RUN --trial f00d1_00001
    writer = EventWriter(run_dir, "tune")
    writer.write("trial_end", trial_id="f00d1_00001", status="TERMINATED")
    writer.close()
    env = {**os.environ, "GPUMON_HOME": str(tmp_path), "COLUMNS": "200"}

    def trials(*args: str) -> str:
        argv = [sys.executable, "-m", "gpumon", "trials", LIVE, *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=True).stdout

    rows = {line.split()[0].rstrip("*"): line.split()[1] for line in trials().splitlines() if line.startswith("f00d1")}
    assert rows == {"f00d1_00000": "TERMINATED", "f00d1_00001": STOPPED, "f00d1_00002": "RUNNING"}
    doc = json.loads(trials("--json"))
    assert {t["id"]: t["status"] for t in doc["trials"]} == rows


def test_every_metric_has_a_series_and_the_experiments_is_the_curve() -> None:
    exp = Experiment()
    exp.apply({"type": "tune_start", "metric": "loss", "mode": "min", "space": ["lr"]})
    exp.apply({"type": "trial_start", "trial_id": "t1", "config": {"lr": 0.1}})
    for i, loss in enumerate([0.5, 0.4], start=1):
        exp.apply({"type": "trial_result", "trial_id": "t1", "iteration": i, "metrics": {"loss": loss, "acc": i}})
    exp.apply({"type": "trial_result", "trial_id": "t1", "iteration": 3, "metrics": {"acc": 3}})  # no loss
    trial = exp.trials["t1"]
    assert trial.history["loss"] is trial.curve and trial.curve.values == [0.5, 0.4]
    assert trial.history["acc"].steps == [1, 2, 3] and trial.best == 0.4
    assert exp.space == ("lr",) and exp.to_dict()["space"] == ["lr"]
    assert trial.revision == 4 and exp.revision == 5


def test_trials_still_active_when_the_search_ended_read_stopped(tmp_path: Path) -> None:
    record_experiment(tmp_path, DONE, live_trials(), live=False)  # two trials had no end when tune_end came
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    monitor.refresh()
    snap = monitor.snapshot(DONE)
    assert snap is not None and snap.info.ended and snap.info.running == 0
    assert [r.status for r in snap.trials] == ["TERMINATED", STOPPED, STOPPED]


def test_the_selected_trials_curves_are_kept_while_other_trials_change(tmp_path: Path) -> None:
    run_dir = record_live(tmp_path)
    monitor = ExperimentsMonitor(RunStore(tmp_path))
    monitor.refresh()
    first = monitor.snapshot(LIVE, "f00d1_00000")
    assert first is not None and first.curves is not None
    writer = EventWriter(run_dir, "tune")
    writer.write("trial_result", trial_id="f00d1_00002", iteration=2, metrics={"loss": 0.3})
    writer.close()
    monitor.refresh()
    second = monitor.snapshot(LIVE, "f00d1_00000")
    assert second is not None and second is not first and second.curves is first.curves  # the chart needs no redraw


def test_the_best_trial_is_tunes_by_last_result_not_the_best_value_ever_seen() -> None:
    exp = Experiment()
    exp.apply({"type": "tune_start", "metric": "loss", "mode": "min"})
    for trial, losses in (("a", [0.1, 0.9]), ("b", [0.5, 0.4])):  # a was best once, b is best at the end
        exp.apply({"type": "trial_start", "trial_id": trial, "config": {}})
        for i, loss in enumerate(losses, 1):
            exp.apply({"type": "trial_result", "trial_id": trial, "iteration": i, "metrics": {"loss": loss}})
    best = exp.best_trial()
    assert best is not None and best.id == "b"  # tune.ResultGrid.get_best_result(scope="last") picks b too
    assert exp.trials["a"].best == 0.1  # the row still shows each trial's best ever
