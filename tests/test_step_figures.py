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


def test_a_bf16_autocast_runs_flops_are_said_to_be_bf16(gpumon: Gpumon) -> None:
    """A CPU run under torch.autocast("cpu", dtype=torch.bfloat16): its counted step's matmuls ran in bf16, and
    the row says so even where no peak (no MFU) is known."""
    pytest.importorskip("torch")
    row, _ = _run(gpumon, "grad_accum.py", "1", "30", "bf16")
    [event] = [e for e in EventReader(Path(row["dir"])).each() if e["type"] == "flops"]
    assert set(event["dtypes"]) == {"bf16"}, event
    assert row["flops_dtype"] == "bf16" and row["mfu"] is None and "CPU" in row["mfu_reason"], row


@pytest.mark.parametrize("how", ["loader", "tensors"])
def test_flops_after_a_batch_size_warm_up_are_counted_at_the_new_batch(gpumon: Gpumon, how: str) -> None:
    """Batch 64 for 10 steps, then 256: the FLOPs per step (and the achieved rate) are those of a step at 256, as
    FlopCounterMode counts it in the script, and say the shape they were counted at; with or without a
    DataLoader."""
    pytest.importorskip("torch")
    row, log = _run(gpumon, "batch_warmup.py", how, "10", "60")
    ref = {int(size): int(flops) for size, flops in re.findall(r"^REF (\d+) (\d+)$", log, re.M)}
    events = [e for e in EventReader(Path(row["dir"])).each() if e["type"] == "flops"]
    assert [e["shape"][0][0] for e in events] == [64, 256], events
    for event in events:
        assert event["flops"] == pytest.approx(ref[event["shape"][0][0]], rel=0.02), (event, ref)
    assert row["flops_per_step"] == pytest.approx(ref[256], rel=0.02), (row["flops_per_step"], ref)
    assert row["flops_shape"] == ([[256, 128], [256]] if how == "loader" else [[256, 128]]), row  # x, y / x
    assert row["achieved_flops_per_s"] == pytest.approx(row["flops_per_step"] / row["step_time_s"], rel=1e-6)


@pytest.mark.parametrize("accum", [1, 4])
def test_samples_a_second_of_a_plain_loop_are_its_batch_at_its_pace(gpumon: Gpumon, accum: int) -> None:
    """A plain loop over DataLoader(batch_size=32) logs no samples/s of its own: SAMPLES/S is 32 x SPEED's steps a
    second (128 x with 4 micro-batches a step)."""
    pytest.importorskip("torch")
    row, _ = _run(gpumon, "grad_accum.py", str(accum), "120")
    assert row["step_time_s"], row
    expected = 32 * accum / row["step_time_s"]
    assert row["samples_per_s"] == pytest.approx(expected, rel=1e-6), (row["samples_per_s"], expected)
    listed = gpumon("runs").stdout
    assert f"{expected:.0f}" in listed, listed


def test_a_batch_whose_size_is_not_sure_counts_no_samples() -> None:
    """What each real DataLoader's batch counts as samples: the shared first dimension where the loader batched
    the items itself; nothing where that is a guess."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from gpumon.telemetry.feeding import Feed, batch_size, hook_dataloader

    hook_dataloader(torch, Feed)  # what the bootstrap does: knows torch's default collate from here on
    data = TensorDataset(torch.randn(70, 8), torch.randint(0, 3, (70,)))

    def sizes(loader: DataLoader) -> list[int | None]:
        it = iter(loader)
        return [batch_size(batch, it) for batch in it]

    assert sizes(DataLoader(data, batch_size=32)) == [32, 32, 6]  # the short last batch is its own size
    words = [{"ids": torch.arange(4), "text": "a"}] * 8
    assert sizes(DataLoader(words, batch_size=4)) == [None, None]  # a list of strings beside the ids
    assert sizes(DataLoader(data, batch_size=None)) == [None] * 70  # no batching: an item is not a batch
    packed = DataLoader(data, batch_size=32, collate_fn=lambda items: torch.cat([x for x, _ in items])[None])
    assert sizes(packed) == [None, None, None]  # a collate of its own: (1, 256) is no batch of 1
    mine = DataLoader(data, batch_size=32, collate_fn=lambda items: torch.stack([x for x, _ in items]))
    assert sizes(mine) == [32, 32, None]  # ... a full batch of its own collate is sure, a short one is not
