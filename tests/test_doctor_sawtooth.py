"""Issue 16 point 5: memory freed at each epoch's end is a sawtooth, projected from its peaks."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.doctor.leak import analyse_series

GB = 2**30
EXAMPLE = Path(__file__).resolve().parents[1] / "trainers" / "examples" / "sawtooth_epoch.py"


def _sawtooth(steps: int, cycle: int, per_step: float, drift: float = 0.0) -> tuple[list[int], list[float]]:
    noise = random.Random(7)
    xs = list(range(1, steps + 1))
    return xs, [GB + (s % cycle) * per_step + drift * s + noise.gauss(0, 2000) for s in xs]


def test_flat_peaks_project_no_crash_and_say_what_grows_within_a_cycle() -> None:
    state = analyse_series(*_sawtooth(3000, 300, 1e6), capacity_bytes=8 * GB).state
    assert state.cycle == 300 and state.runs_out_at is None and state.state != "leak"
    text = state.describe()
    assert "within each cycle of ~300 iterations, released at its end" in text and "peaks flat" in text
    assert "iteration ~" not in text  # no run-out projected from one epoch's rise


def test_rising_peaks_project_from_the_peaks() -> None:
    state = analyse_series(*_sawtooth(3000, 300, 1e6, drift=20_000), capacity_bytes=8 * GB).state
    assert state.state == "leak" and state.runs_out_at is not None
    from_peaks = 2999 + (8 * GB - (GB + 299e6 + 20_000 * 2999)) / 20_000
    assert abs(state.runs_out_at - from_peaks) < 0.05 * from_peaks  # not ~7 GB / 1 MB per step = ~7,000
    assert "peaks rising" in state.describe()


def test_a_real_epoch_loop_that_frees_its_outputs_reads_as_a_sawtooth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, wait

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    store = RunStore()
    args = ("--epochs", "8", "--steps-per-epoch", "120")
    env = (("OMP_NUM_THREADS", "1"), ("GPUMON_STEP_RATE", "0"))
    spec = RunSpec(kind="script", program=str(EXAMPLE), args=args, env=env, no_census=True)
    # every step recorded: on a loaded machine the rate limit would sample the cycle unevenly
    record = wait(launch(spec, store, 0), store, timeout=180)
    assert record.state == "finished"
    report = subprocess.run([sys.executable, "-m", "gpumon", "doctor", record.id, "--json"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    memory = json.loads(report.stdout)["memory"]["0"]
    assert memory["cycle"] and abs(memory["cycle"] - 120) <= 12, memory
    assert memory["runs_out_at"] is None and memory["state"] != "leak", memory
