"""The Tune callback with a real (small) Ray Tune run on the CPU, and its events folded into trial rows."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.events import EventReader
from gpumon.core.runs.reading.telemetry import RunTelemetry

pytest.importorskip("ray.tune")

SEARCH = textwrap.dedent(
    """
    import sys
    import ray
    from ray import tune
    from gpumon.tune import GpumonCallback

    def train(config):
        if config["lr"] == 0.3:
            raise ValueError("lr 0.3 diverged")
        for i in range(3):
            tune.report({"loss": config["lr"] * (3 - i), "acc": 0.5 + i / 10})

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tuner = tune.Tuner(
        train,
        param_space={"lr": tune.grid_search([0.1, 0.2, 0.3])},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(
            storage_path=sys.argv[1],
            verbose=0,
            # No run_dir: under `gpumon launch script` it reports to the run it belongs to.
            callbacks=[GpumonCallback(metric="loss", mode="min", search_alg="grid", scheduler="fifo")],
        ),
    )
    tuner.fit()
    ray.shutdown()
    """
)


def test_the_callback_pickles_even_with_its_file_open(tmp_path: Path) -> None:
    from gpumon.tune.callback import GpumonCallback

    callback = GpumonCallback(tmp_path, metric="loss", mode="min")
    callback.setup(total_num_samples=4)  # opens the event file
    clone = pickle.loads(pickle.dumps(callback))
    clone.on_experiment_end(trials=[])  # the copy reopens its own file
    types = [e["type"] for e in EventReader(tmp_path).poll()]
    assert types == ["tune_start", "tune_end"]


def launch_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Any:
    """A Tune script launched with `gpumon launch script`, run to its end; the ended RunRecord."""
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, wait

    script = tmp_path / "search.py"
    script.write_text(text)
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    store = RunStore()
    spec = RunSpec(kind="script", program=str(script), args=(str(tmp_path / "ray"),))
    final = wait(launch(spec, store, visible_gpus=0), store, timeout=240)
    assert final.state == "finished", final.log_path(0).read_text()[-3000:]
    return final


def test_a_users_tune_script_launched_by_gpumon_becomes_trial_rows(tmp_path: Path, monkeypatch) -> None:
    final = launch_search(tmp_path, monkeypatch, SEARCH)
    tele = RunTelemetry(final.dir, use_summary=False)
    tele.update()
    exp = tele.tune
    assert exp is not None
    assert (exp.metric, exp.mode, exp.search_alg, exp.scheduler, exp.num_samples) == ("loss", "min", "grid", "fifo", 3)
    assert exp.ended and exp.done == 3
    by_lr = {t.config["lr"]: t for t in exp.trials.values()}
    assert sorted(by_lr) == [0.1, 0.2, 0.3]
    assert by_lr[0.1].status == by_lr[0.2].status == "TERMINATED"
    assert by_lr[0.1].iteration == 3 and by_lr[0.1].curve.values == pytest.approx([0.3, 0.2, 0.1])
    assert by_lr[0.1].metrics["acc"] == pytest.approx(0.7)
    assert by_lr[0.1].pid and by_lr[0.1].pid != final.status["pid"]  # the trial's own worker process
    assert by_lr[0.3].status == "ERROR" and "lr 0.3 diverged" in (by_lr[0.3].error or "")
    best = exp.best_trial()
    assert best is not None and best.config["lr"] == 0.1 and best.best == pytest.approx(0.1)
    assert tele.skipped == 0

    table = subprocess.run([sys.executable, "-m", "gpumon", "trials"], capture_output=True, text=True, check=True)
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"{final.id}  grid / fifo  metric loss (min)  trials 3/3  ended")
    assert lines[1].startswith(f"best: {best.id}  loss=0.1 (last result, as Tune ranks)  lr=0.1")
    assert "lr 0.3 diverged" in table.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "gpumon", "trials", final.id[:14], "--json"], capture_output=True, text=True, check=True
    )
    doc = json.loads(as_json.stdout)
    assert doc["best_trial"] == best.id and len(doc["trials"]) == 3


def test_trials_without_tune_events_says_what_to_do(tmp_path: Path) -> None:
    env = {**os.environ, "GPUMON_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "gpumon", "trials"], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gpumon: error: no Ray Tune trials in any run: start a search with 'gpumon tune SEARCH.toml', or run your "
        "own Tune script, unchanged, with 'gpumon launch script' (gpumon adds its callback through Ray's "
        "RAY_TUNE_CALLBACKS)"
    )  # README: a Tune script is seen without code; nothing tells the user to add a callback


PLAIN_SEARCH = textwrap.dedent(
    """
    import sys
    import numpy as np
    import ray
    from ray import tune

    def train(config):  # numpy scalars, as many trainables report them
        for i in range(3):
            tune.report({"loss": np.float32(config["lr"] * (3 - i)), "acc": np.float64(0.5 + i / 10), "n": np.int64(i)})

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tune.Tuner(
        train,
        param_space={"lr": tune.grid_search([0.1, 0.2])},
        tune_config=tune.TuneConfig(metric="acc", mode="max"),
        run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0),
    ).fit()
    ray.shutdown()
    """
)


def test_an_unmodified_tune_script_feeds_the_trials_with_its_metric_mode_and_numpy_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GpumonCallback in the script: RAY_TUNE_CALLBACKS (set by gpumon launch) adds it, once."""
    final = launch_search(tmp_path, monkeypatch, PLAIN_SEARCH)
    events = EventReader(final.dir).poll()
    starts = [e for e in events if e["type"] == "tune_start"]
    assert len(starts) == 1 and (starts[0]["metric"], starts[0]["mode"]) == ("acc", "max")  # from TuneConfig
    assert (starts[0]["search_alg"], starts[0]["scheduler"]) == ("BasicVariantGenerator", "FIFOScheduler")
    results = [e for e in events if e["type"] == "trial_result"]
    assert len(results) == 6  # 2 trials x 3 reports, none twice
    assert all(set(r["metrics"]) >= {"loss", "acc", "n"} for r in results)
    assert {type(v) for r in results for v in r["metrics"].values()} <= {int, float}
    # Where each trial's worker runs: its pid means something only on that node (the Trials view's GPU memory).
    assert all(isinstance(r["trial_pid"], int) and r["trial_hostname"] == socket.gethostname() for r in results)
    assert all(isinstance(r["trial_node_ip"], str) and r["trial_node_ip"] for r in results)


SLOW_SEARCH = textwrap.dedent(
    """
    import sys, time
    import ray
    from ray import tune

    def train(config):
        for i in range(600):
            time.sleep(0.1)
            tune.report({"loss": config["lr"] / (i + 1)})

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tune.Tuner(
        train,
        param_space={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0),
    ).fit()
    ray.shutdown()
    """
)


def test_gpumon_stop_ends_a_users_search_as_ctrl_c_does_and_no_trial_reads_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from gpumon.core.runs.reading.experiments import ExperimentsMonitor
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, wait

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SEARCH)
    store = RunStore()
    record = launch(RunSpec(kind="script", program=str(script), args=(str(tmp_path / "ray"),)), store, 0)
    deadline = time.monotonic() + 120
    while not any(e["type"] == "trial_result" for e in EventReader(record.dir).poll()):
        assert time.monotonic() < deadline and (store.load(record.dir) or record).live, "no trial reported"
        time.sleep(0.5)
    done = subprocess.run([sys.executable, "-m", "gpumon", "stop", record.id], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    final = wait(record, store, timeout=30)
    assert final.state == "stopped"
    events = EventReader(final.dir).poll()
    assert [e["mode"] for e in events if e["type"] == "run_stop"] == ["int"]  # SIGINT first, as ctrl+c
    ends = [e for e in events if e["type"] == "tune_end"]
    assert len(ends) == 1  # Tune ended its experiment and said so
    monitor = ExperimentsMonitor(store)
    info = monitor.refresh()[0]
    assert info.running == 0 and info.state == "stopped"
    snapshot = monitor.snapshot(info.run_id)
    assert snapshot is not None and snapshot.trials
    assert not {t.status for t in snapshot.trials} & {"RUNNING", "PENDING"}, {t.id: t.status for t in snapshot.trials}
    listed = subprocess.run(
        [sys.executable, "-m", "gpumon", "trials", record.id, "--json"], capture_output=True, text=True
    )
    statuses = {t["status"] for t in json.loads(listed.stdout)["trials"]}
    assert statuses and not statuses & {"RUNNING", "PENDING"}, statuses  # the CLI reads them as the view does


def test_a_search_started_in_the_users_own_shell_shows_up_once_the_callback_is_exported(tmp_path: Path) -> None:
    """Not launched by gpumon: `export RAY_TUNE_CALLBACKS=gpumon.tune.GpumonCallback` once, then plain python."""
    script = tmp_path / "search.py"
    script.write_text(PLAIN_SEARCH)
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "RAY_TUNE_CALLBACKS": "gpumon.tune.GpumonCallback",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}  # fmt: skip
    env.pop("GPUMON_RUN_DIR", None)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "ray")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]

    def gpumon(*args: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    import time

    deadline = time.monotonic() + 30  # the adopted supervisor sees the driver gone within a second
    while (runs := gpumon("runs", "--json")["runs"]) and runs[0]["status"] == "running":
        assert time.monotonic() < deadline, runs
        time.sleep(0.5)
    assert len(runs) == 1 and runs[0]["kind"] == "tune" and runs[0]["program"] == "search.py (outside gpumon)"
    assert runs[0]["status"] == "exited"  # its exit code went to the user's shell, not to gpumon
    trials = gpumon("trials", runs[0]["id"], "--json")
    assert len(trials["trials"]) == 2 and trials["metric"] == "acc"
    assert {t["status"] for t in trials["trials"]} == {"TERMINATED"}
