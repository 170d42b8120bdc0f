"""The per-step figures measured inside the ranks on the training patterns people use (issue 48): a step's loss
under gradient accumulation (and a step the GradScaler skipped), FLOPs after the batch grows, the dtype of a bf16
autocast run, samples a second from the DataLoader's batches. Each is a real script launched through gpumon and
compared with what the script itself prints."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.events import EventReader
from tests.conftest import Gpumon

SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"


def _run(gpumon: Gpumon, script: str, *args: str, env: tuple[str, ...] = ()) -> tuple[dict[str, Any], str]:
    """(the ended run's row in ``gpumon runs --json``, its output)."""
    extra = [arg for pair in env for arg in ("--env", pair)]
    done = gpumon("launch", "script", str(SCRIPTS / script), "--env", "OMP_NUM_THREADS=1", *extra, "--", *args)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    gpumon.wait_ended(run_id)
    [row] = json.loads(gpumon("runs", "--json", run_id).stdout)["runs"]
    assert row["status"] == "finished", row
    return row, gpumon("logs", run_id).stdout


def _printed_losses(log: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"^step (\d+) loss (\S+)$", log, re.M)}


def _backward_losses(run_dir: str) -> dict[int, float]:
    return {
        e["step"]: e["metrics"]["loss"]
        for e in EventReader(Path(run_dir)).each()
        if e["type"] == "metrics" and e.get("source") == "backward"
    }


@pytest.mark.parametrize("mode", ["plain", "scaler"])
def test_a_steps_loss_under_gradient_accumulation_is_the_loss_the_script_prints(gpumon: Gpumon, mode: str) -> None:
    """(loss / 4).backward() on 4 micro-batches, then one optimizer step: the step's loss is the sum of the four
    (their mean), as the script prints it, not the last micro-batch's quarter. With AMP's GradScaler, a step the
    scaler skipped (its loss overflowed the scale) adds nothing to the next step's loss."""
    pytest.importorskip("torch")
    args = ("4", "30") if mode == "plain" else ("4", "30", "scaler")
    row, log = _run(gpumon, "grad_accum.py", *args, env=("GPUMON_STEP_RATE=0",))  # every step's loss written
    printed = _printed_losses(log)
    assert len(printed) == 30 and ("skipped a step" in log) == (mode == "scaler"), log[-2000:]
    seen = _backward_losses(row["dir"])
    assert set(seen) == set(printed), (sorted(seen), sorted(printed))
    for step, value in seen.items():
        assert value == pytest.approx(printed[step], rel=1e-5), (step, value, printed[step])
    assert row["step"] == 30 and row["loss_source"] == "backward"
    assert row["loss"] == pytest.approx(printed[30], rel=1e-5), (row["loss"], printed[30])
