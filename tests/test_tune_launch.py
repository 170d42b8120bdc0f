"""`gpumon tune`: a real digits search on a private local Ray, stopped one trial at a time, then whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.store import RunStore
from tests.conftest import wait_until

pytest.importorskip("ray.tune")

REPO = Path(__file__).resolve().parents[1]
SEARCH = """
name = "stoppable"
num_samples = 3
max_concurrent_trials = 2
seed = 0
[space]
l1 = { type = "pow2", low = 8, high = 16 }
lr = { type = "loguniform", low = 1e-3, high = 1e-1 }
batch_size = 64
epochs = 400
"""


def gpumon(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpumon", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_search_from_gpumon_stops_one_trial_then_all_and_keeps_its_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUMON_HOME", str(home))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token file written into this user's ~/.ray by tests
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    (tmp_path / "search.toml").write_text(SEARCH)

    started = gpumon("tune", "search.toml", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[-1]
    record = RunStore().resolve(run_id)
    tele = RunTelemetry(record.dir, use_summary=False)

    def two_trials_reporting() -> bool:
        tele.update()
        exp = tele.tune
        return exp is not None and sum(1 for t in exp.trials.values() if (t.iteration or 0) >= 2) >= 2

    try:
        assert started.stdout.splitlines()[-1] in (f"running {run_id}", f"starting {run_id}")
        assert record.spec.kind == "tune" and record.spec.label() == "stoppable"
        assert (record.dir / "search.toml").read_text() == SEARCH  # the run keeps what it started from
        (tmp_path / "search.toml").unlink()  # and no longer needs the original
        assert wait_until(two_trials_reporting, timeout=150), (record.dir / "logs" / "rank0.log").read_text()[-3000:]
        assert tele.tune is not None
        first, second = sorted(t.id for t in tele.tune.trials.values() if t.iteration)[:2]

        stopped = gpumon("stop", run_id, "--trial", first, cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == f"asked {run_id} to stop trial {first} (at its next result)"

        def first_ended() -> bool:
            tele.update()
            return tele.tune is not None and tele.tune.trials[first].status == "TERMINATED"

        assert wait_until(first_ended, timeout=30)
        assert tele.tune.trials[second].status == "RUNNING"  # the others go on
        assert RunStore().resolve(run_id).live

        whole = gpumon("stop", run_id, cwd=tmp_path)
        assert whole.returncode == 0, whole.stdout + whole.stderr
        assert whole.stdout.splitlines()[0] == f"asked {run_id} to stop its trials (stop again to end it now)"
        assert whole.stdout.splitlines()[-1] == f"finished {run_id}"  # Tune ended it itself, within the grace
    finally:  # a failed assertion must not leave Ray running
        if RunStore().resolve(run_id).live:
            gpumon("stop", run_id, "--kill", cwd=tmp_path)

    tele.update()
    exp = tele.tune
    assert exp is not None and exp.ended
    assert exp.trials[first].iteration is not None and exp.trials[first].iteration < 400
    assert all(t.status != "ERROR" for t in exp.trials.values())
    assert (exp.search_alg, exp.scheduler, exp.metric, exp.mode) == ("random", "fifo", "loss", "min")
    results = record.dir / "ray_results" / "search"
    trial_dirs = [p for p in results.iterdir() if p.is_dir() and (p / "result.json").exists()]
    assert len(trial_dirs) >= 2 and any(any(d.glob("checkpoint_*")) for d in trial_dirs)
    log = (record.dir / "logs" / "rank0.log").read_text()
    assert "results in" in log and "best trial:" in log
    doc = json.loads(gpumon("trials", run_id, "--json", cwd=tmp_path).stdout)
    assert doc["run"] == run_id and {t["id"] for t in doc["trials"]} >= {first, second}
    shown = {t["id"]: t["status"] for t in doc["trials"]}
    assert shown[first] == "STOPPED"  # Tune says TERMINATED, as for a trial that finished: the request says why
    assert wait_until(lambda: not _ray_processes_of(record.dir), timeout=20), _ray_processes_of(record.dir)


def _ray_processes_of(run_dir: Path) -> list[int]:
    """Live processes still carrying this run's id in their environment (Ray's workers inherit it)."""
    import psutil

    left = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("GPUMON_RUN_DIR") == str(run_dir):
                left.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return left


def test_stopping_a_trial_that_does_not_exist_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumon.core.events import EventWriter
    from tests.test_runs_view import record_runs

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    record_runs(tmp_path, live=False)
    record = RunStore().list()[-1]
    assert gpumon("stop", record.id, "--trial", "abc", cwd=tmp_path).stderr.strip() == (
        f"gpumon: error: {record.id} has no Ray Tune trials: --trial goes with a search's run"
    )
    EventWriter(record.dir, "tune").write("trial_start", trial_id="t1", config={})
    result = gpumon("stop", record.id, "--trial", "t2", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"gpumon: error: {record.id} has no trial 't2' (trials: t1)"
