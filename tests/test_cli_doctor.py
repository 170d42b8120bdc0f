"""`gpumon doctor`: a live leaking run launched by gpumon, diagnosed with a census; a failed run explained."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.runs.record.store import RunStore
from tests.conftest import wait_until

REPO = Path(__file__).resolve().parents[1]
TREND = "(leak|growth)"


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=180)


class Doctor:
    """What `gpumon doctor RUN` says, read in this process (the CLI's own diagnose and render): a `gpumon doctor`
    a poll cost ~0.5 CPU-s, taken from the run waited on. Each read folds only what is new, as the CLI's census
    wait does."""

    def __init__(self, run_id: str) -> None:
        from gpumon.core.doctor.leak import LeakWatch
        from gpumon.core.runs.reading.telemetry import RunTelemetry

        self.store = RunStore()
        self.record = self.store.resolve(run_id)
        self.telemetry, self.watch = RunTelemetry(self.record.dir), LeakWatch()

    def text(self) -> str:
        from gpumon.cli.doctor import render
        from gpumon.core.doctor.report import diagnose

        record = self.store.load(self.record.dir) or self.record
        self.telemetry.update()
        return "\n".join(render(diagnose(record, self.telemetry, watch=self.watch), record))


def test_doctor_names_a_live_leak_and_its_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    script = str(REPO / "trainers" / "examples" / "leak_loss_graph.py")
    started = gpumon(
        "launch", "script", script, "--env", "OMP_NUM_THREADS=1", "--", "--steps", "3000", "--step-ms", "5"
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[-1]
    says = Doctor(run_id)
    try:
        # leak, or growth where memory would not fill within 24 h at the run's pace (a big host, a loaded one)
        verdict = wait_until(lambda: re.search(f"memory {TREND}: ", says.text()), 90, step=0.5)
        report = gpumon("doctor", run_id, "--census", "--gap", "10")
        assert verdict, gpumon("doctor", run_id).stdout
    finally:
        gpumon("stop", run_id, "--kill")
    lines = report.stdout.splitlines()
    assert report.returncode == 0, report.stderr
    assert lines[0] == f"asked {run_id} for two censuses 10 steps apart..."
    # A named cause is a leak whether or not memory fills before the run's end, and the headline leads with it.
    named = "`total_loss` in leak_loss_graph.py:41 \\(main\\) keeps every step's autograd graph"
    assert re.match(f"{run_id}  running  memory leak: {named} .*\\): \\+", lines[1]), lines[1]
    assert re.search("rank 0: leak: \\+", report.stdout)
    # The census names who keeps the graph, where:
    assert "rank 0: `total_loss` in leak_loss_graph.py:41 (main) keeps every step's autograd graph" in report.stdout
    assert "fix:  accumulate a number: `total_loss += loss.item()`" in report.stdout


def test_doctor_explains_a_failed_run_as_json_and_refuses_a_census(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    script = str(REPO / "trainers" / "examples" / "oom_batch.py")
    started = gpumon("launch", "script", script, "--", "--batch-size", "64", "--steps", "2")
    run_id = started.stdout.split()[-1]
    assert wait_until(lambda: RunStore().resolve(run_id).state == "failed", timeout=60)
    doc = json.loads(gpumon("doctor", run_id, "--json").stdout)
    assert doc["failure"]["kind"] == "host_oom"
    assert doc["failure"]["memory"]["requested"] == 64 * 128 * 2**20
    assert doc["advice"] and doc["advice"][0]["key"] == "host_batch"
    refused = gpumon("doctor", run_id, "--census")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"gpumon: error: {run_id} is failed: a census needs a live run (it looks inside its processes)"
    )
    unknown = gpumon("doctor", "nope")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
