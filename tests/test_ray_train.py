"""Ray Train's workers are the run's ranks: a real TorchTrainer of 2 CPU workers, launched as a plain script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.store import RunStore
from tests.conftest import needs_installed, wait_until

needs_installed("ray")
needs_installed("torch")

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "ray_train_small.py"
STEPS = 3 * 8  # 3 epochs of 512 samples, batch 32, split between 2 workers


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=120)


def run_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[str, dict[str, Any]]:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token file written into this user's ~/.ray by tests
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    started = gpumon("launch", "script", str(SCRIPT), "--env", "OMP_NUM_THREADS=1", "--", *args)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[-1]
    try:
        ended = wait_until(lambda: not RunStore().resolve(run_id).live, timeout=240, step=1)
    finally:
        gpumon("stop", run_id, "--kill")
    record = RunStore().resolve(run_id)
    assert ended and record.state == "finished", (record.dir / "logs" / "rank0.log").read_text()[-3000:]
    doc = next(r for r in json.loads(gpumon("runs", "--json").stdout)["runs"] if r["id"] == run_id)
    return run_id, doc


def test_ray_train_workers_are_the_runs_ranks_with_their_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, doc = run_to_end(tmp_path, monkeypatch, "--epochs", "3", "--step-ms", "250")

    # Each worker is a rank, named by its world rank, with every step (the last one too: Ray ends its workers
    # without running atexit) and its memory.
    assert doc["nproc"] == 2
    assert [(r["rank"], r["step"], r["started"]) for r in doc["ranks"]] == [
        (0, STEPS, "ray train"),
        (1, STEPS, "ray train"),
    ]
    assert doc["step"] == STEPS and doc["memory_kind"] == "heap" and doc["memory_bytes"] > 0
    assert doc["flops_per_step"] > 0 and doc["flops_method"] == "counted"
    assert doc["data_wait_share"] is not None  # measured per worker (prepare_data_loader's DataLoader)
    tele = RunTelemetry(RunStore().resolve(run_id).dir)
    tele.update()
    assert {rank: feed.share() is not None for rank, feed in tele.feeding.ranks.items()} == {0: True, 1: True}

    # What the workers handed ray.train.report: rank 0's last report whole, as Ray Train's result keeps it,
    # and its train_loss is the run's loss.
    reported = doc["reported"]
    assert reported["source"] == "ray.train" and reported["step"] == STEPS
    assert reported["metrics"]["epoch"] == 2 and reported["metrics"]["accuracy"] == pytest.approx(0.52)
    assert doc["loss_source"] == "ray.train" and doc["loss"] == reported["metrics"]["train_loss"]

    # The doctor no longer says that nothing stepped.
    said = gpumon("doctor", run_id).stdout
    assert "no process of the run stepped" not in said and "no memory samples" not in said, said


def test_lightning_inside_ray_train_counts_each_worker_as_a_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_installed("lightning")  # the test extra brings it (pyproject); Ray Train's Lightning glue needs it
    _, doc = run_to_end(tmp_path, monkeypatch, "--epochs", "2", "--lightning")
    assert [(r["rank"], r["step"], r["started"]) for r in doc["ranks"]] == [(0, 16, "ray train"), (1, 16, "ray train")]
    # Lightning's self.log and the RayTrainReportCallback's report (Lightning's logged values, once an epoch)
    assert doc["loss_source"] == "lightning" and doc["loss"] is not None
    assert doc["reported"]["source"] == "ray.train" and "train_loss" in doc["reported"]["metrics"]
