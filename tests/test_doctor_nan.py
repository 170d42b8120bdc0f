"""A loss that turns NaN or climbs far above its best: found at its step, alerted once, explained with the
run's own learning rate. Real runs through ``gpumon launch script`` (tests/data/scripts/nan_lr.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpumon.core.doctor.divergence import diverging, loss_advice, loss_problem
from gpumon.core.runs.store import RunStore
from gpumon.core.runs.telemetry import RunTelemetry
from tests.conftest import wait_until

SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "nan_lr.py"


def gpumon(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, timeout=300)


def launch(home: Path, *script_args: str) -> str:
    done = gpumon(home, "launch", "script", str(SCRIPT), "--", *script_args)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def ended(home: Path, run_id: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("GPUMON_HOME", str(home))
    assert wait_until(lambda: not RunStore().resolve(run_id).live, timeout=300, step=0.5)
    rows = {r["id"]: r for r in json.loads(gpumon(home, "runs", "--json").stdout)["runs"]}
    return rows[run_id]


def test_a_too_high_learning_rate_alerts_at_its_nan_step_and_the_doctor_leads_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "first_bad"
    run_id = launch(tmp_path, "--lr", "1e6", "--log", "--out", str(out))
    row = ended(tmp_path, run_id, monkeypatch)
    first = int(out.read_text())
    assert row["status"] == "finished"
    # inf at its first bad step, nan after it: the alert says what the supervisor saw then
    assert row["alerts"] in ([f"loss is {v} from step {first} on rank 0"] for v in ("inf", "nan")), row["alerts"]
    doctor = json.loads(gpumon(tmp_path, "doctor", run_id, "--json").stdout)
    assert doctor["headline"] == f"loss is nan from step {first} on rank 0"
    lead = doctor["advice"][0]
    assert lead["key"] == "lr" and "lr=1e+06" in lead["title"], doctor["advice"]
    assert "lr=100000" in lead["change"]
    keys = [a["key"] for a in doctor["advice"]]
    assert {"grad_norm", "amp", "log_zero", "inputs"} <= set(keys)
    text = gpumon(tmp_path, "doctor", run_id).stdout
    assert f"loss: loss is nan from step {first} on rank 0" in text and "set_detect_anomaly(True)" in text


def test_a_run_that_ends_before_the_supervisors_next_pass_still_carries_its_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last pass raises the alert after the final summary was written: it must be in what readers get."""
    pytest.importorskip("torch")
    out = tmp_path / "first_bad"
    run_id = launch(tmp_path, "--lr", "1e6", "--log", "--steps", "8", "--step-ms", "1", "--out", str(out))
    row = ended(tmp_path, run_id, monkeypatch)
    first = int(out.read_text())
    assert row["alerts"] in ([f"loss is {v} from step {first} on rank 0"] for v in ("inf", "nan")), row["alerts"]


def test_with_no_code_change_the_nan_is_found_from_backward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "first_bad"
    run_id = launch(tmp_path, "--lr", "1e6", "--out", str(out))
    row = ended(tmp_path, run_id, monkeypatch)
    first = int(out.read_text())
    [alert] = row["alerts"]
    assert alert.startswith("loss is nan from step ") and alert.endswith(" on rank 0"), alert
    step = int(alert.split()[5])
    assert first <= step <= first + 2, (first, alert)  # 50 steps/s: every step is sampled (200/s)
    doctor = json.loads(gpumon(tmp_path, "doctor", run_id, "--json").stdout)
    # the learning rate read from the optimizer itself: named with no telemetry.log in the script
    assert doctor["advice"][0]["key"] == "lr" and "lr=1e+06" in doctor["advice"][0]["title"], doctor["advice"][0]


def test_a_healthy_run_stays_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    run_id = launch(tmp_path, "--lr", "0.01", "--log", "--steps", "80")
    row = ended(tmp_path, run_id, monkeypatch)
    assert row["status"] == "finished" and row["alerts"] == []
    doctor = json.loads(gpumon(tmp_path, "doctor", run_id, "--json").stdout)
    assert doctor["loss"] is None and doctor["advice"] == []


# --- divergence: a climb far above the running minimum --------------------------------------------


def fold(losses: Sequence[float | str], lr: float | None = None) -> RunTelemetry:
    telemetry = RunTelemetry(Path("/nonexistent"))
    for step, loss in enumerate(losses):
        metrics = {"loss": loss, **({"lr": lr} if lr is not None else {})}
        telemetry.apply({"type": "metrics", "src": "rank0", "t": 1.8e9 + step, "step": step, "metrics": metrics})
    return telemetry


def test_a_loss_that_climbs_far_above_its_best_is_a_warning() -> None:
    falling = [2.0 * 0.97**s for s in range(100)]
    climbing = falling + [falling[-1] * 1.3**k for k in range(1, 20)]
    problem = loss_problem(fold(climbing, lr=0.05))
    assert problem is not None and problem.kind == "diverging"
    assert problem.text.startswith("loss diverging on rank 0: ") and "its best" in problem.text
    advice = loss_advice(problem, fold(climbing, lr=0.05))
    assert advice[0].key == "lr" and "lr=0.05" in advice[0].title
    # a finite loss: no word of NaN (a BoringModel run was told "the loss was not finite from step 1594")
    assert not {"log_zero", "inputs"} & {a.key for a in advice}, [a.key for a in advice]
    assert not any("not finite" in a.why for a in advice)
    unknown_lr = {a.key: a for a in loss_advice(problem, fold(climbing))}
    assert "clip_grad_norm_" in unknown_lr["diverging"].change and "log_zero" not in unknown_lr


@pytest.mark.parametrize(
    "losses",
    [
        [2.0 * 0.97**s for s in range(200)],  # falls
        [1.0 + 0.5 * ((s * 7919) % 13) / 13 for s in range(200)],  # noisy plateau
        [5.0 - s * 0.001 + (3.0 if s % 50 == 0 else 0.0) for s in range(200)],  # single spikes
        [-3.0 + 0.01 * s for s in range(200)],  # negative: no ratio
        [10.0 * (s + 1) for s in range(30)],  # rises during warm-up only
        [max(1e-5, 0.5**s) * (20 if s > 190 else 1) for s in range(200)],  # fitted to ~0, wobbles x20
    ],
    ids=["falls", "plateau", "spikes", "negative", "warm-up", "near-zero"],
)
def test_healthy_curves_do_not_diverge(losses: list[float]) -> None:
    assert diverging(list(range(len(losses))), losses) is None
    assert loss_problem(fold(losses)) is None


def test_the_advice_follows_what_the_run_reported() -> None:
    def lead(losses: list[float | str], **metrics: float) -> str:
        telemetry = fold(losses)
        telemetry.latest[0].update(metrics)
        problem = loss_problem(telemetry)
        assert problem is not None and problem.kind == "nonfinite"
        return loss_advice(problem, telemetry)[0].key

    assert lead(["nan"] * 5) == "log_zero"  # NaN from its first step: an op or the data, not a learning rate
    assert lead([1.0] * 30 + ["nan"], grad_norm=float("inf")) == "grad_norm"
    assert lead([1.0] * 30 + ["inf"], loss_scale=2.0**-10) == "amp"
    assert lead([1.0] * 30 + ["nan"], learning_rate=3e-4, grad_norm=0.5) == "log_zero"
    assert lead([1.0] * 30 + ["nan"], learning_rate=0.05) == "lr"
