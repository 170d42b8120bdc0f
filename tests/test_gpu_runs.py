"""On a real GPU: runs launched by gpumon on CUDA, and what gpumon records and concludes about them.

CUDA telemetry against torch's own counters, a real CUDA out-of-memory (classified, and --oom-retry
until it fits), the leak examples on the right memory, and every trainer on cuda. Part of
``pytest -m gpu``; skipped where NVML sees no device or torch has no CUDA.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.doctor.leak import LeakWatch
from gpumon.core.doctor.report import diagnose
from gpumon.core.events import EventReader
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord, RunStore
from gpumon.core.runs.supervision.launcher import launch, wait
from tests.conftest import requires_gpu, wait_until

pytestmark = [pytest.mark.gpu, requires_gpu]

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "trainers" / "examples"

# Its own per-optimizer post-hook runs just before gpumon's global one (torch calls them in that
# order) and writes what torch says at that instant, for the same step.
PROBE = """
import json, sys, torch
from torch import nn
out = open(sys.argv[1], "w")
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda()
optimizer = torch.optim.Adam(model.parameters())
def mine(opt, args, kwargs):
    out.write(json.dumps([torch.cuda.memory_allocated(), torch.cuda.memory_reserved(),
                          torch.cuda.max_memory_allocated()]) + "\\n")
optimizer.register_step_post_hook(mine)
kept = []
for step in range(30):
    loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    kept.append(torch.empty(step * 100_000, device="cuda"))  # the figures differ from step to step
out.close()
"""


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunStore]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUMON_HOME", str(tmp_path_factory.mktemp("gpumon-home")))
        yield RunStore()


def start(store: RunStore, kind: str, program: str | None = None, *args: str, **spec: object) -> RunRecord:
    return launch(RunSpec(kind=kind, program=program, args=args, **spec), store, 1)  # type: ignore[arg-type]


def events(record: RunRecord, kind: str) -> list[dict]:
    """The run's events of one type, as gpumon's own reader sees them (in time order)."""
    return [e for e in EventReader(record.dir).poll() if e["type"] == kind]


def log(record: RunRecord) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((record.dir / "logs").glob("*.log")))


# --- telemetry ------------------------------------------------------------------------------


def test_step_events_equal_torchs_own_counters_and_record_the_host_heap_and_device_size(
    torch, store: RunStore, tmp_path: Path
) -> None:
    script, mine = tmp_path / "probe.py", tmp_path / "mine.jsonl"
    script.write_text(PROBE)
    record = wait(start(store, "script", str(script), str(mine)), store, 120)
    assert record.state == "finished", log(record)
    steps = events(record, "step")
    theirs = [json.loads(line) for line in mine.read_text().splitlines()]
    assert len(steps) == len(theirs) == 30
    for event, (alloc, reserved, peak) in zip(steps, theirs, strict=True):
        assert event["dev"] == "cuda:0"
        assert (event["alloc"], event["reserved"], event["peak"]) == (alloc, reserved, peak), event["step"]
        assert isinstance(event["heap"], int) and event["heap"] > 0  # the host's live heap beside the GPU's
    (device,) = events(record, "device")
    assert device["total"] == torch.cuda.get_device_properties(0).total_memory
    tele = RunTelemetry(record.dir)
    tele.update()
    assert tele.memory[0].capacity == device["total"] and len(tele.memory[0].heap) == 30


# --- a real CUDA out-of-memory --------------------------------------------------------------


def test_a_real_cuda_oom_is_parsed_with_a_batch_estimate_and_oom_retry_ends_in_a_run_that_fits(
    torch, store: RunStore
) -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    per_sample = int(total * 0.6 / 32 / 2**20)  # batch 64 needs 1.2x the GPU; batch 32 needs 0.6x
    args = ("--device", "cuda", "--batch-size", "64", "--accum-steps", "1", "--steps", "3")
    args += ("--mb-per-sample", str(per_sample))
    first = start(store, "script", str(EXAMPLES / "oom_batch.py"), *args, oom_retry=True, keep_batch=True)
    chain = [wait(first, store, 120)]
    while chain[-1].state == "failed" and len(chain) < 4:
        next_id = wait_until(lambda r=chain[-1]: (store.load(r.dir) or r).status.get("retried_as"), timeout=10)
        if not next_id:
            break
        chain.append(wait(store.resolve(next_id), store, 120))
    assert [r.state for r in chain] == ["failed", "finished"], [log(r)[-2000:] for r in chain]
    assert "fits: batch 32 x 2 = 64" in log(chain[-1])

    found = diagnose(chain[0])
    assert found.failure is not None and found.failure.kind == "cuda_oom", found.to_dict()
    numbers = found.failure.memory
    assert numbers is not None and numbers.requested == 64 * per_sample * 2**20
    assert numbers.total is not None and abs(numbers.total - total) <= 0.01 * total
    batch = next(a for a in found.advice if a.key == "batch_size")
    size = int(batch.change.split()[-1])
    assert 32 <= size < 64, batch  # scaled from the message's numbers: 64 x 0.9 / 1.2 = 48


# --- the leak examples on CUDA --------------------------------------------------------------

LEAK_STEPS = ("--device", "cuda", "--steps", "500", "--step-ms", "2")


@pytest.fixture(scope="module")
def leak_runs(torch, store: RunStore) -> dict[str, RunRecord]:
    names = ["leak_loss_graph.py", "leak_outputs_list.py"]
    started = {name: start(store, "script", str(EXAMPLES / name), *LEAK_STEPS) for name in names}
    started |= {f"{n} --fixed": start(store, "script", str(EXAMPLES / n), *LEAK_STEPS, "--fixed") for n in names}
    return {name: wait(record, store, 180) for name, record in started.items()}


def watched(record: RunRecord) -> LeakWatch:
    tele = RunTelemetry(record.dir)
    tele.update()
    watch = LeakWatch()
    watch.update(tele)
    return watch


def test_total_loss_plus_loss_on_cuda_is_a_host_memory_leak_with_gpu_memory_flat(leak_runs) -> None:
    record = leak_runs["leak_loss_graph.py"]
    assert record.state == "finished", log(record)
    states = watched(record).series_states()
    # The detector's verdict; whether it is an alarm (leak) or growth depends on filling this host's memory
    # within 24 h at the run's pace (doctor/horizon.py), i.e. on the host's size.
    host = states[0, "host"]
    assert host.grows and "leak" in (host.state, host.trend), states
    assert not states[0, "gpu"].grows, states
    headline = diagnose(record).headline()
    assert headline.startswith(f"host memory {host.state}") and "autograd graph" in headline, headline


def test_kept_outputs_on_cuda_are_a_gpu_memory_leak_projected_against_the_devices_size(torch, leak_runs) -> None:
    record = leak_runs["leak_outputs_list.py"]
    assert record.state == "finished", log(record)
    gpu = watched(record).series_states()[0, "gpu"]
    assert "leak" in (gpu.state, gpu.trend) and gpu.capacity == torch.cuda.get_device_properties(0).total_memory
    assert gpu.runs_out_at is not None and "the GPU fills" in gpu.describe()


@pytest.mark.parametrize("name", ["leak_loss_graph.py --fixed", "leak_outputs_list.py --fixed"])
def test_the_healthy_twins_on_cuda_warn_on_neither_memory(leak_runs, name: str) -> None:
    record = leak_runs[name]
    assert record.state == "finished", log(record)
    states = watched(record).series_states()
    assert set(states) == {(0, "gpu"), (0, "host")}
    assert not any(s.warning for s in states.values()), states


# --- the trainers on cuda -------------------------------------------------------------------

SHORT = ("--epochs", "1", "--max-steps", "12", "--log-every", "4")
CUDA = ("--device", "cuda")
RESNET50 = ("--preset", "resnet50", "--data", "synthetic", "--samples", "512")
CKPT = ("--batch-size", "128")  # one rank with the 2-rank CPU test's global batch: 13 steps an epoch


@pytest.fixture(scope="module")
def trainer_runs(torch, store: RunStore) -> dict[str, RunRecord]:
    runs = {
        "ddp": start(store, "ddp", None, *CUDA, *SHORT, nproc=1),
        "dp": start(store, "dp", None, *CUDA, *SHORT),
        "model-parallel": start(store, "model-parallel", None, *SHORT, "--devices", "cuda:0,cuda:0"),
        "resnet50": start(
            store,
            "ddp",
            None,
            *CUDA,
            *SHORT,
            "--preset",
            "resnet50",
            "--data",
            "synthetic",
            "--samples",
            "512",
            nproc=1,
        ),
        "checkpoint": start(store, "ddp", None, *CUDA, *CKPT, "--epochs", "2", "--max-steps", "20", nproc=1),
    }
    if torch.cuda.device_count() >= 2:
        runs["ddp x2"] = start(store, "ddp", None, *CUDA, *SHORT, nproc=2)
        runs["model-parallel x2"] = start(store, "model-parallel", None, *SHORT, "--devices", "cuda:0,cuda:1")
    return {name: wait(record, store, 400) for name, record in runs.items()}


@pytest.mark.parametrize(
    "name", ["ddp", "dp", "model-parallel", "resnet50", "checkpoint", "ddp x2", "model-parallel x2"]
)
def test_each_trainer_runs_on_cuda_with_telemetry(torch, trainer_runs, name: str) -> None:
    if name not in trainer_runs:
        pytest.skip("needs 2 visible GPUs")
    record = trainer_runs[name]
    assert record.state == "finished", log(record)[-3000:]
    steps = events(record, "step")
    assert steps and all(e["dev"].startswith("cuda:") and e["alloc"] > 0 for e in steps)
    if name.startswith("ddp") or name in ("resnet50", "checkpoint"):
        assert "backend nccl" in log(record)
    if name == "resnet50":
        params = max(e["alloc"] for e in steps)
        assert params > 23_000_000 * 4  # ResNet-50's 23.5M weights at least, in float32


def test_a_checkpoint_saved_on_gpu_resumes_on_gpu(torch, trainer_runs, store: RunStore) -> None:
    first = trainer_runs["checkpoint"]
    assert first.state == "finished", log(first)[-3000:]
    checkpoints = first.dir / "checkpoints"
    resumed = wait(
        start(store, "ddp", None, *CUDA, *CKPT, "--epochs", "3", "--max-steps", "26", "--resume",
              "--checkpoint-dir", str(checkpoints), nproc=1),
        store,
        300,
    )  # fmt: skip
    text = log(resumed)
    assert resumed.state == "finished", text[-3000:]
    assert "epoch0002.pt: epoch 2 done, step 20" in text and "epoch 3 step 21 " in text
    state = torch.load(checkpoints / "epoch0003.pt", map_location="cpu")
    assert (state["epoch"], state["global_step"]) == (3, 26)
