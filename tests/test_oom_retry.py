"""--oom-retry: a run that runs out of memory is relaunched with half the batch size until it fits."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.core.runs.record.spec import RunSpec, SpecError, validate
from gpumon.core.runs.record.store import RunStore
from gpumon.core.runs.supervision.launcher import launch, wait
from gpumon.core.runs.supervision.retry import halved
from tests.conftest import wait_until

REPO = Path(__file__).resolve().parents[1]
OOM_SCRIPT = str(REPO / "trainers" / "examples" / "oom_batch.py")


def test_halving_keeps_the_effective_batch_when_asked() -> None:
    spec = RunSpec(kind="ddp", args=("--epochs", "1", "--batch-size=48"), oom_retry=True, keep_batch=True)
    smaller, old, new = halved(spec) or (None, 0, 0)
    assert (old, new) == (48, 24)
    assert smaller is not None and smaller.args == ("--epochs", "1", "--batch-size", "24", "--accum-steps", "2")
    odd, old, new = halved(RunSpec(kind="script", program="t.py", args=("--batch-size", "5", "--accum-steps", "3"),
                                   oom_retry=True, keep_batch=True)) or (None, 0, 0)  # fmt: skip
    assert odd is not None and odd.args == ("--batch-size", "2", "--accum-steps", "8")  # 5x3=15 <= 2x8: no sample lost
    plain, _, _ = halved(RunSpec(kind="dp", oom_retry=True)) or (None, 0, 0)
    assert plain is not None and plain.args == ("--batch-size", "32")  # the trainers' default is 64
    assert halved(RunSpec(kind="dp", args=("--batch-size", "1"), oom_retry=True)) is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (RunSpec(kind="script", program=OOM_SCRIPT, oom_retry=True), "--oom-retry halves --batch-size: pass the"),
        (RunSpec(kind="script", program=OOM_SCRIPT, args=("--batch-size", "big"), oom_retry=True), "whole number"),
        (RunSpec(kind="dp", keep_batch=True), "--keep-batch goes with --oom-retry"),
        (RunSpec(kind="pipeline", nproc=2, oom_retry=True, keep_batch=True), "the pipeline trainer does not take"),
        (RunSpec(kind="script", program=OOM_SCRIPT, args=("--batch-size", "8"), oom_retry=True, keep_batch=True),
         "--keep-batch doubles --accum-steps: pass"),
    ],
)  # fmt: skip
def test_retry_options_that_cannot_work_are_refused(spec: RunSpec, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        validate(spec, visible_gpus=0)


def test_an_out_of_memory_run_is_retried_with_half_the_batch_until_it_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    store = RunStore()
    args = ("--batch-size", "64", "--accum-steps", "1", "--steps", "3")
    first = launch(RunSpec(kind="script", program=OOM_SCRIPT, args=args, oom_retry=True, keep_batch=True), store, 0)
    chain = [wait(first, store, timeout=60)]
    while chain[-1].state == "failed" and len(chain) < 4:  # its supervisor starts the retry just after the end
        next_id = wait_until(lambda r=chain[-1]: (store.load(r.dir) or r).status.get("retried_as"), timeout=5)
        if not next_id:
            break
        chain.append(wait(store.resolve(next_id), store, timeout=60))
    assert [r.state for r in chain] == ["failed", "failed", "finished"], [r.to_dict() for r in chain]
    batches = [(r.spec.args[r.spec.args.index("--batch-size") + 1], r.spec.args[r.spec.args.index("--accum-steps") + 1])
               for r in chain]  # fmt: skip
    assert batches == [("64", "1"), ("32", "2"), ("16", "4")]  # the effective batch stays 64
    assert [r.spec.retry_of for r in chain] == [None, chain[0].id, chain[1].id]
    assert "DefaultCPUAllocator: can't allocate memory" in chain[0].log_path(0).read_text()
    assert "fits: batch 16 x 4 = 64" in chain[2].log_path(0).read_text()
    from gpumon.core.runs.reading.telemetry import RunTelemetry

    tele = RunTelemetry(chain[0].dir)
    tele.update()
    assert f"out of memory at batch size 64: retrying as {chain[1].id} with 32" in tele.notes
