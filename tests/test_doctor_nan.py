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
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.store import RunStore
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
    # inf at its first bad step, nan later: the alert says what the supervisor had seen then
    (alert,) = row["alerts"]
    assert alert.startswith((f"loss is inf from step {first} on rank 0", f"loss turned inf at step {first}, nan"))
    assert ". Fix: lower the learning rate (lr=1e+06): divide it by 10 (e.g. lr=100000)" in alert  # the doctor's
    doctor = json.loads(gpumon(tmp_path, "doctor", run_id, "--json").stdout)
    assert doctor["headline"].startswith(f"loss turned inf at step {first}, nan from step "), doctor["headline"]
    assert doctor["headline"].endswith(" on rank 0")
    lead = doctor["advice"][0]
    assert lead["key"] == "lr" and "lr=1e+06" in lead["title"], doctor["advice"]
    assert "lr=100000" in lead["change"]
    # it climbed (1.10, then ~1e12, ~1e24) before it overflowed: no op, no bad sample, no fp16 (nothing shows any)
    assert doctor["loss"]["onset"] == "climb" and "the loss climbed from 1.10 (step 0)" in doctor["loss"]["before"]
    assert [a["key"] for a in doctor["advice"]] == ["lr", "grad_norm"], doctor["advice"]
    text = gpumon(tmp_path, "doctor", run_id).stdout
    assert f"loss: loss turned inf at step {first}, nan from step " in text
    assert "  steps: the steps the script passed to telemetry.log" in text and text.count("steps: ") == 1


def test_a_run_that_ends_before_the_supervisors_next_pass_still_carries_its_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last pass raises the alert after the final summary was written: it must be in what readers get."""
    pytest.importorskip("torch")
    out = tmp_path / "first_bad"
    run_id = launch(tmp_path, "--lr", "1e6", "--log", "--steps", "8", "--step-ms", "1", "--out", str(out))
    row = ended(tmp_path, run_id, monkeypatch)
    first = int(out.read_text())
    (alert,) = row["alerts"]
    assert alert.startswith((f"loss is inf from step {first} on rank 0", f"loss turned inf at step {first}, nan"))


def test_with_no_code_change_the_nan_is_found_from_backward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "first_bad"
    run_id = launch(tmp_path, "--lr", "1e6", "--out", str(out))
    row = ended(tmp_path, run_id, monkeypatch)
    first = int(out.read_text())
    [alert] = row["alerts"]
    # read from backward(): gpumon's steps count from 1, the script's from 0 (its step 3 is gpumon's 4)
    assert alert.startswith((f"loss is inf from step {first + 1} on rank 0", f"loss turned inf at step {first + 1}"))
    doctor = json.loads(gpumon(tmp_path, "doctor", run_id, "--json").stdout)
    # the learning rate read from the optimizer itself: named with no telemetry.log in the script
    assert doctor["advice"][0]["key"] == "lr" and "lr=1e+06" in doctor["advice"][0]["title"], doctor["advice"][0]


NONFINITE = Path(__file__).resolve().parent / "data" / "scripts" / "nonfinite.py"


def test_an_overflow_is_inf_at_its_step_then_nan_and_no_bad_sample_is_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: the first bad value was inf (step 3), NaN came at step 5; the doctor said "loss is nan from step
    3" and offered "a bad sample makes the loss NaN at once" though the same batch gave finite losses before."""
    pytest.importorskip("torch")
    done = gpumon(tmp_path, "launch", "script", str(NONFINITE), "--", "--mode", "overflow")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    row = ended(tmp_path, run_id, monkeypatch)
    log = (tmp_path / "runs" / run_id / "logs").glob("*.log")
    printed = "".join(path.read_text() for path in log)
    assert "step 3: loss inf" in printed and "step 5: loss nan" in printed  # what the script itself saw
    assert row["alerts"][0].startswith(("loss is inf from step 3 on rank 0", "loss turned inf at step 3, nan"))
    doctor = json.loads(gpumon(tmp_path, "doctor", run_id, "--json").stdout)
    assert doctor["headline"] == "loss turned inf at step 3, nan from step 5 on rank 0"
    assert doctor["loss"]["onset"] == "climb"
    assert (
        doctor["loss"]["before"] == "the loss climbed from 1.10 (step 1) to 1.10e+25 (step 2), then was inf at step 3"
    )
    keys = [a["key"] for a in doctor["advice"]]
    assert "inputs" not in keys and "log_zero" not in keys and "amp" not in keys, keys
    text = gpumon(tmp_path, "doctor", run_id).stdout
    assert text.count("  steps: gpumon counts optimizer steps from 1") == 1, text
    assert "a bad sample" not in text and "at once" not in text, text


def test_one_bad_batch_is_nan_at_once_and_the_batch_is_the_first_thing_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    done = gpumon(tmp_path, "launch", "script", str(NONFINITE), "--", "--mode", "bad-batch")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    ended(tmp_path, run_id, monkeypatch)
    doctor = json.loads(gpumon(tmp_path, "doctor", run_id, "--json").stdout)
    assert doctor["headline"] == "loss was nan 1 time (step 6) on rank 0"
    assert (doctor["loss"]["onset"], doctor["loss"]["recovered"]) == ("jump", True)
    lead = doctor["advice"][0]
    assert lead["key"] == "inputs" and "finite again after" in lead["why"], doctor["advice"]
    assert "lr" not in [a["key"] for a in doctor["advice"]]  # lr=0.001 and no climb: not a cause


def test_a_healthy_run_stays_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    run_id = launch(tmp_path, "--lr", "0.01", "--log", "--steps", "80")
    row = ended(tmp_path, run_id, monkeypatch)
    assert row["status"] == "finished" and row["alerts"] == []
    doctor = json.loads(gpumon(tmp_path, "doctor", run_id, "--json").stdout)
    assert doctor["loss"] is None and doctor["advice"] == []


# --- divergence: a climb far above the running minimum --------------------------------------------


def fold(losses: Sequence[float | str | tuple[float | str, int]], lr: float | None = None) -> RunTelemetry:
    """The script's losses through telemetry.log, at steps 0, 1, ... (or (loss, step) pairs)."""
    telemetry = RunTelemetry(Path("/nonexistent"))
    for index, item in enumerate(losses):
        loss, step = item if isinstance(item, tuple) else (item, index)
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
    assert not any("not finite" in a.why or "went bad" in a.why for a in advice)
    # a scheduler's small lr long after the climb (BoringModel's StepLR: 1e-05 at its end) is not the advice
    decayed = loss_advice(problem, fold(climbing, lr=1e-5))
    assert "lr" not in {a.key for a in decayed} and "diverging" in {a.key for a in decayed}, [a.key for a in decayed]
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
    assert lead([1.0] * 30 + [40.0, 2000.0, "nan"], grad_norm=5e4) == "grad_norm"
    assert lead([1.0] * 30 + ["inf"], loss_scale=2.0**-10) == "amp"
    assert lead([1.0] * 30 + ["nan"], learning_rate=3e-4, grad_norm=0.5) == "inputs"  # a jump from a steady loss
    assert lead([1.0] * 30 + [20.0, 400.0, "nan"], learning_rate=0.05) == "lr"


def keys(losses: list[float | str], **metrics: float) -> list[str]:
    telemetry = fold(losses)
    telemetry.latest[0].update(metrics)
    problem = loss_problem(telemetry)
    assert problem is not None
    return [a.key for a in loss_advice(problem, telemetry)]


def test_each_cause_is_offered_only_where_the_runs_numbers_support_it() -> None:
    # a climb: the learning rate and the gradients; no bad sample (the same data gave finite losses before)
    assert keys([1.0] * 30 + [20.0, 400.0, "inf", "nan"], lr=1e-3) == ["grad_norm", "lr"]
    # at the first step no update has happened: no learning rate, no gradient; an op or the data
    assert keys(["nan"] * 5, lr=10.0, grad_norm=5.0) == ["log_zero", "inputs"]
    # from a steady value at once: the batch first; a reported small norm and an ordinary lr are no causes
    assert keys([2.3] * 30 + ["nan"], lr=1e-3, grad_norm=0.7) == ["inputs", "log_zero"]
    # finite again after: one batch went bad, not the weights
    assert keys([2.3] * 30 + ["nan", 2.3, 2.3], lr=1e-3) == ["inputs", "log_zero"]
    # the steps just before were not read: no claim of "at once" (a bad sample), nor of a climb
    assert keys([(2.3, 10), (2.3, 20), ("nan", 30)]) == ["lr", "log_zero", "grad_norm"]
    # fp16 only where the run shows it: a loss scale below 1
    assert "amp" not in keys([2.3] * 30 + ["nan"]) and "amp" in keys([2.3] * 30 + ["nan"], loss_scale=2.0**-8)


def test_the_words_say_which_value_from_which_step_and_what_was_not_read() -> None:
    def text(losses: list) -> str:
        problem = loss_problem(fold(losses))
        assert problem is not None
        return problem.text

    assert text([1.0, 1e25, "inf", "inf", "nan", "nan"]) == "loss turned inf at step 2, nan from step 4 on rank 0"
    assert text([1.0, "nan", "nan"]) == "loss is nan from step 1 on rank 0"
    assert (
        text([(1.0, 1), (1.0, 2), ("nan", 6)])
        == "loss is nan from step 6 on rank 0 (finite at step 2; steps 3-5 not read)"
    )
    assert text([1.0, "nan", 1.0, "inf", 1.0]) == "loss was nan or inf 2 times (steps 1-3) on rank 0"
