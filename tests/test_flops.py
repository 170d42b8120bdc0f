"""FLOPs per step with no code (issue 37): an unmodified script launched by gpumon, its one counted step against
PyTorch's own FlopCounterMode run here on the same model; MFU from recorded events and the dense-peak table."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.events import EventReader
from gpumon.core.gpu.peaks import dense_peaks, peak_for
from gpumon.core.runs.reading.use import GpuUse, mfu_text
from tests.conftest import Gpumon

SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"


def _launch(gpumon: Gpumon, *args: str) -> str:
    # one torch thread: with one per core on a busy 2-CPU machine each op waits for the other thread's turn
    done = gpumon("launch", "script", str(SCRIPTS / "flops_models.py"), "--env", "OMP_NUM_THREADS=1", "--", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def _ended_row(gpumon: Gpumon, run_id: str) -> dict[str, Any]:
    gpumon.wait_ended(run_id)
    (done,) = [r for r in json.loads(gpumon("runs", "--json").stdout)["runs"] if r["id"] == run_id]
    assert done["status"] in ("finished", "failed"), done
    return done


def _flops_events(run_dir: str) -> list[dict[str, Any]]:
    return [e for e in EventReader(Path(run_dir)).each() if e["type"] == "flops"]


def _reference(kind: str, seq: int | None = None) -> int:
    """One step (forward, backward, optimizer step) of the script's own model counted here by FlopCounterMode."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    spec = importlib.util.spec_from_file_location("flops_models", SCRIPTS / "flops_models.py")
    assert spec is not None and spec.loader is not None
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    model = models.build(kind)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = models.batches(kind, seq or models.SEQ)
    with FlopCounterMode(display=False) as counter:
        loss = models.loss_of(kind, model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return int(counter.get_total_flops())


@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_one_step_is_counted_as_flopcountermode_counts_it(gpumon: Gpumon, kind: str) -> None:
    pytest.importorskip("torch")
    run_id = _launch(gpumon, kind, "40")
    row = _ended_row(gpumon, run_id)
    assert row["status"] == "finished", row
    expected = _reference(kind)
    assert row["flops_method"] == "counted", row
    assert abs(row["flops_per_step"] - expected) <= 0.1 * expected, (row["flops_per_step"], expected)
    [event] = _flops_events(row["dir"])  # once: the shapes never changed
    assert event["step"] == 4 and event["dev"] == "cpu" and set(event["dtypes"]) == {"fp32"}, event
    # A CPU has no dense peak: the FLOPs and the achieved rate are said, the MFU is not, and why.
    assert row["mfu"] is None and "CPU" in row["mfu_reason"], row
    assert row["achieved_flops_per_s"] == pytest.approx(row["flops_per_step"] / row["step_time_s"], rel=1e-6)
    if kind == "transformer":  # 8 sequences of 32 token ids into its nn.Embedding
        assert event["tokens"] == 256
        assert row["tokens_per_s"] == pytest.approx(256 / row["step_time_s"], rel=1e-6)
    else:
        assert row["tokens_per_s"] is None and "tokens" not in event
    table = gpumon("runs").stdout
    assert "MFU" in table and "TOKENS/S" in table and "—" in table, table


def test_a_new_sequence_length_is_counted_again(gpumon: Gpumon) -> None:
    pytest.importorskip("torch")
    run_id = _launch(gpumon, "transformer", "60", "30")  # sequences of 64 from step 30
    row = _ended_row(gpumon, run_id)
    first, second = _flops_events(row["dir"])
    assert first["step"] == 4 and first["tokens"] == 256
    assert second["step"] > 30 and second["tokens"] == 512, second
    for event, seq in ((first, 32), (second, 64)):
        expected = _reference("transformer", seq)
        assert abs(event["flops"] - expected) <= 0.1 * expected, (event, expected)
    assert row["flops_per_step"] == second["flops"]  # the latest count is the run's


def test_mfu_is_achieved_over_the_dense_peak_of_the_dtype_that_ran() -> None:
    use = GpuUse()
    use.fold("device", {"name": "NVIDIA H100 80GB HBM3"}, 0)
    use.fold("flops", {"step": 4, "flops": 5e14, "method": "counted", "dtypes": {"bf16": 5e14}, "dev": "cuda:0"}, 0)
    fields = use.fields(step_time_s=1.0)
    assert fields["peak_flops_per_s"] == 989.5e12  # dense: the datasheet's 1979 is with sparsity
    assert fields["mfu"] == pytest.approx(5e14 / 989.5e12) and fields["flops_dtype"] == "bf16"
    assert mfu_text(fields["mfu"]) == "51%"
    # Two ranks on two GPUs: their FLOPs over their two peaks.
    use.fold("device", {"name": "NVIDIA H100 80GB HBM3"}, 1)
    use.fold("flops", {"step": 4, "flops": 5e14, "method": "counted", "dtypes": {"bf16": 5e14}, "dev": "cuda:0"}, 1)
    assert use.fields(step_time_s=2.0)["mfu"] == pytest.approx(1e15 / 2.0 / (2 * 989.5e12))
    # An unknown GPU: no number, a reason.
    other = GpuUse()
    other.fold("device", {"name": "Some Future GPU"}, 0)
    other.fold("flops", {"step": 4, "flops": 1e12, "dtypes": {"bf16": 1e12}, "dev": "cuda:0"}, 0)
    unknown = other.fields(1.0)
    assert unknown["mfu"] is None and "no dense peak known for Some Future GPU" in unknown["mfu_reason"]
    assert unknown["achieved_flops_per_s"] == 1e12 and mfu_text(None) == "—"
    restored = GpuUse.from_state(json.loads(json.dumps(use.to_state())))
    assert restored.fields(1.0) == use.fields(1.0)


def test_the_peak_table_tells_devices_apart_and_mixes_dtypes_by_time() -> None:
    names = ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "NVIDIA A10")
    h100, pcie, a100, a10 = (dense_peaks(n) for n in names)
    assert h100 and pcie and a100 and a10
    assert (h100["bf16"], pcie["bf16"], a100["bf16"], a10["bf16"]) == (989.5e12, 756.5e12, 312e12, 125e12)
    assert dense_peaks("NVIDIA L40S")["bf16"] == 362.05e12 and dense_peaks("NVIDIA L4")["bf16"] == 121e12  # type: ignore[index]
    assert dense_peaks("NVIDIA H200")["tf32"] == 494.5e12 and dense_peaks("Tesla T4")["fp16"] == 65e12  # type: ignore[index]
    # Half the FLOPs in bf16, half in fp32 with TF32 off on an A100: the time each half takes at its own peak.
    peak, dtype, _ = peak_for("NVIDIA A100-SXM4-40GB", {"bf16": 1.0, "fp32": 1.0})
    assert peak == pytest.approx(2.0 / (1 / 312e12 + 1 / 19.5e12)) and dtype == "mostly bf16"
    assert peak_for("NVIDIA A100-SXM4-40GB", {"fp8": 1.0})[2] == "NVIDIA A100-SXM4-40GB has no fp8 peak in the table"
    assert peak_for("cpu", {"fp32": 1.0})[0] is None


async def test_the_runs_view_shows_mfu_and_tokens_from_recorded_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpumon.core.events import EventWriter, encode
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import write_json
    from tests.conftest import make_app
    from tests.test_runs_view import cell, info, open_runs, select

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    run_id = "script-1127-040000-a1b2"
    run_dir = tmp_path / "runs" / run_id
    (run_dir / "logs").mkdir(parents=True)
    write_json(run_dir / "spec.json", RunSpec("script", program="train.py", cwd="/tmp").to_dict())
    write_json(run_dir / "status.json", {"state": "finished", "created": 1.0, "started": 2.0, "ended": 60.0})
    writer = EventWriter(run_dir, "rank0")
    writer.write("proc_start", rank=0)
    writer.write("device", dev="cuda:0", name="NVIDIA H100 80GB HBM3", total=80 * 2**30)
    for step in range(1, 21):  # a step every 0.5 s by the events' clock, as a real run's are
        fields = {"step": step, "dt": None if step == 1 else 0.5, "dev": "cuda:0", "alloc": 1, "reserved": 1, "peak": 1}
        writer.write_line(encode("step", "rank0", fields, now=1000.0 + 0.5 * step))
        if step == 4:  # 2e14 FLOPs a step in bf16, 4,096 tokens: 4e14 FLOP/s at 0.5 s a step
            dtypes = {"bf16": 2e14}
            writer.write("flops", step=4, flops=2e14, method="counted", dtypes=dtypes, tokens=4096, dev="cuda:0")
    writer.close()
    app = make_app(gpus=1)
    async with app.run_test(size=(200, 40)) as pilot:
        await open_runs(pilot, 1)
        assert cell(app, run_id, "mfu") == "40%"  # 4e14 / 989.5e12 dense bf16
        await select(pilot, run_id)
        assert "MFU 40% (bf16) · 400.0T FLOP/s · 8.2k tok/s" in info(app)


def test_where_the_counter_sees_nothing_the_step_is_estimated_and_an_evaluation_spoils_the_window() -> None:
    """In-process, on FlopCount itself: a model without a counted op (an embedding and a sum) is 6N per token,
    said so; a model switched to eval and back inside the counted step is counted again at the next one."""
    torch = pytest.importorskip("torch")
    from gpumon.telemetry import phases
    from gpumon.telemetry.flops import FlopCount

    model = torch.nn.Embedding(100, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    written: list[dict[str, Any]] = []
    count = FlopCount(torch)

    def step(spoil: bool = False) -> None:
        ids = torch.randint(0, 100, (4, 8))
        model(ids).sum().backward()
        if spoil:
            phases._state.changes += 2  # what model.eval() then model.train() count (phases.hook)
        opt.step()
        opt.zero_grad()

    for n in range(1, 4):
        step()
        count.tick(n, opt, lambda kind, **f: written.append(f))
    assert count.active is not None and not written  # entered after step 3
    step(spoil=True)
    count.tick(4, opt, lambda kind, **f: written.append(f))
    assert not written and count.due == 0  # spoiled: the next step is counted
    step()
    count.tick(5, opt, lambda kind, **f: written.append(f))  # enters again
    step()
    count.tick(6, opt, lambda kind, **f: written.append(f))
    [event] = written
    assert event["method"] == "estimate" and event["flops"] == 6 * 1600 * 32 and event["tokens"] == 32
    assert event["dtypes"] == {"fp32": 6 * 1600 * 32} and "6N per token" in event["why"]
    step()
    count.tick(7, opt, lambda kind, **f: written.append(f))
    assert count.active is None and len(written) == 1  # counted once: no new shape


def test_the_counter_sees_each_copy_of_the_step_with_its_non_blocking_flag() -> None:
    """copies.py reads the copy ops FlopCounterMode hands it (the CUDA side, pinned or pageable, needs a GPU:
    tests/test_gpu_use.py); here the same ops on the CPU, as the counter sees them."""
    torch = pytest.importorskip("torch")
    from gpumon.telemetry.flops import _counter_class

    counter = _counter_class(torch)(display=False)
    seen: list[tuple[Any, Any, bool]] = []
    parts = counter.copies.parts
    counter.copies.see = lambda *a: seen.append(found) if (found := parts(*a)) else None  # type: ignore[method-assign]
    x, y = torch.ones(4, 3), torch.zeros(4, 3, dtype=torch.float64)
    with counter:
        x.to(torch.float64, non_blocking=True)
        y.copy_(x)
        y.copy_(x, non_blocking=True)
    assert [(tuple(s.shape), d.dtype, nb) for s, d, nb in seen] == [
        ((4, 3), torch.float64, True),
        ((4, 3), torch.float64, False),
        ((4, 3), torch.float64, True),
    ]
    assert counter.copies.take() == {}  # nothing went to a GPU
