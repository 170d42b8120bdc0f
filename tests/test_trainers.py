"""The training programs, run for real: torch on the CPU, torchrun with 2 gloo processes, no mocks."""

from __future__ import annotations

import copy
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainers import data
from trainers.model import Bottleneck, TwoStageModel, build_model, split_model

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
CPU = torch.device("cpu")


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMON_", "RANK", "WORLD_SIZE", "MASTER_"))}
    path = os.pathsep.join(p for p in (str(ROOT), base.get("PYTHONPATH")) if p)  # runs from a temp cwd too
    return {**base, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", **extra}


def run(cmd: list[str], cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd, env=env(**extra))


def run_all(cmds: list[list[str]]) -> list[tuple[int, str, str]]:
    """Start every command at once (each mostly waits on `import torch`), then collect them."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env()) for c in cmds]
    outputs = [p.communicate(timeout=120) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]


def module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"trainers.{name}", *args]


def losses(stdout: str) -> list[float]:
    return [float(m) for m in re.findall(r"^epoch \d+ step \d+ loss ([\d.]+)", stdout, re.M)]


def test_every_program_answers_help() -> None:
    results = run_all([module(name, "--help") for name in ("ddp", "dp", "model_parallel")])
    for rc, out, err in results:
        assert rc == 0, err
        assert out.startswith("usage: python -m trainers.") and "--batch-size" in out and "--freeze" in out


def test_resnet50_layout() -> None:
    model = build_model("resnet50", 3, 1000, 224)
    names = [n for n, m in model.named_children() if isinstance(m, Bottleneck)]
    assert [sum(n.startswith(f"layer{i}_") for n in names) for i in (1, 2, 3, 4)] == [3, 4, 6, 3]
    first_blocks = [getattr(model, f"layer{i}_0") for i in (1, 2, 3, 4)]
    assert [b.conv1.out_channels for b in first_blocks] == [64, 128, 256, 512]
    assert [b.conv3.out_channels for b in first_blocks] == [256, 512, 1024, 2048]
    fc, conv, pool = (model.get_submodule(name) for name in ("head.2", "stem.0", "stem.3"))
    assert Bottleneck.expansion == 4 and isinstance(fc, nn.Linear) and fc.in_features == 2048
    assert isinstance(conv, nn.Conv2d) and conv.kernel_size == (7, 7) and isinstance(pool, nn.MaxPool2d)
    assert 25e6 < sum(p.numel() for p in model.parameters()) < 26e6  # torchvision's resnet50: 25.6 M
    small = build_model("resnet50", 3, 10, 32).eval()  # CIFAR-sized: 3x3 stem, no max pool
    assert small(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_digits_match_scikit_learn() -> None:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images, labels = data.digits().tensors
    torch.testing.assert_close(images, torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16)
    assert labels.tolist() == bunch.target.tolist()


def test_tiny_forward_on_digits_and_split() -> None:
    digits = data.load("digits", val_fraction=0.2, seed=1)
    assert (digits.in_channels, digits.num_classes, digits.image_size) == (1, 10, 8)
    assert len(digits.train) + len(digits.val or []) == 1797
    x, y = digits.train.tensors
    assert x.dtype == torch.float32 and y.dtype == torch.int64 and x.min() >= 0 and x.max() <= 1
    model = build_model("tiny", 1, 10, 8).eval()
    conv = model.get_submodule("stem.0")
    assert isinstance(conv, nn.Conv2d) and conv.kernel_size == (3, 3) and conv.stride == (1, 1)
    out = model(x[:32])
    assert out.shape == (32, 10)
    stage0, stage1 = split_model(model)
    torch.testing.assert_close(stage1(stage0(x[:32])), out)
    assert {n for n, _ in model.named_parameters()} == {n for s in (stage0, stage1) for n, _ in s.named_parameters()}


@pytest.mark.parametrize(("mode", "norm"), [("naive", "batch"), ("micro-batch", "group"), ("micro-batch", "none")])
def test_two_stage_model_matches_unsplit(mode: str, norm: str) -> None:
    torch.manual_seed(0)
    model = build_model("small", 1, 10, 8, norm=norm)
    reference = copy.deepcopy(model)
    two = TwoStageModel(model, (CPU, CPU), split_size=16 if mode == "micro-batch" else 0)
    x, y = torch.rand(50, 1, 8, 8), torch.randint(0, 10, (50,))  # 50: the last chunk is short
    out, expected = two(x), reference(x)
    torch.testing.assert_close(out, expected)
    F.cross_entropy(out, y).backward()
    F.cross_entropy(expected, y).backward()
    grads = dict(reference.named_parameters())
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, grads[name].grad, msg=name)


def test_pipeline_step_matches_unsplit(tmp_path: Path) -> None:
    """GPipe and 1F1B (run side by side) under torchrun: loss and gradients of step 1 equal the unsplit model's."""
    args = ["--mode", "pipeline", "--micro-batches", "4", "--batch-size", "32", "--norm", "group"]
    args += ["--max-steps", "2", "--val-fraction", "0", "--no-checkpoint"]
    schedules = ("gpipe", "1f1b")
    cmd = [*TORCHRUN, "-m", "trainers.model_parallel", *args]
    results = run_all([[*cmd, "--schedule", s, "--dump-first-step", str(tmp_path / s)] for s in schedules])
    for schedule, (rc, out, err) in zip(schedules, results, strict=True):
        assert rc == 0, err[-3000:]
        assert f"pipeline: {schedule}, 4 micro-batches, stages on cpu,cpu, gloo" in out
        first, last = (torch.load(tmp_path / schedule / f"stage{k}.pt") for k in (0, 1))
        model = build_model("tiny", 1, 10, 8, norm="group")
        model.load_state_dict({**first["params"], **last["params"]})  # strict: the stages hold every parameter
        loss = F.cross_entropy(model(first["x"]), last["y"])
        loss.backward()
        assert last["loss"] == pytest.approx(loss.item(), rel=1e-5)
        grads = {**first["grads"], **last["grads"]}
        assert grads.keys() == dict(model.named_parameters()).keys()
        for name, param in model.named_parameters():
            torch.testing.assert_close(grads[name], param.grad, rtol=1e-4, atol=1e-6, msg=f"{schedule} {name}")


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """2 epochs of 13 steps on 2 ranks, cut at step 20; checkpoints land in $GPUMON_RUN_DIR/checkpoints."""
    run_dir = tmp_path_factory.mktemp("run")
    cmd = [*TORCHRUN, "-m", "trainers.ddp", "--epochs", "2", "--max-steps", "20", "--log-every", "5", "--lr", "0.1"]
    return run_dir, run(cmd, cwd=run_dir, GPUMON_RUN_DIR=str(run_dir))


def test_ddp_trains_checkpoints_and_reports(ddp_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    run_dir, result = ddp_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ddp: world size 2, backend gloo" in result.stdout
    seen = losses(result.stdout)
    assert len(seen) >= 4 and seen[-1] < seen[0] - 0.2, result.stdout
    assert re.search(r"^epoch 2 done: step 20 .* val_acc [\d.]+$", result.stdout, re.M)
    state = torch.load(run_dir / "checkpoints" / "epoch0002.pt")
    assert (state["epoch"], state["global_step"]) == (2, 20) and state["optimizer"]["state"]
    assert not any(k.startswith("module.") for k in state["model"])
    events = [json.loads(line) for f in (run_dir / "events").glob("*.jsonl") for line in f.read_text().splitlines()]
    metrics = [e for e in events if e["type"] == "metrics"]
    assert {e["src"] for e in metrics if "loss" in e["metrics"]} == {"rank0", "rank1"}
    assert {e["step"] for e in metrics if e["src"] == "rank1" and "loss" in e["metrics"]} == set(range(1, 21))
    assert sum("val_acc" in e["metrics"] for e in metrics) == 4  # 2 epochs x 2 ranks


def test_ddp_resume_continues(ddp_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    run_dir, first = ddp_run
    assert first.returncode == 0
    cmd = [*TORCHRUN, "-m", "trainers.ddp", "--epochs", "3", "--max-steps", "26", "--resume"]
    result = run([*cmd, "--checkpoint-dir", str(run_dir / "checkpoints")], GPUMON_RUN_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "epoch0002.pt: epoch 2 done, step 20" in result.stdout
    assert "epoch 1 " not in result.stdout and "epoch 3 step 21 " in result.stdout
    state = torch.load(run_dir / "checkpoints" / "epoch0003.pt")
    assert (state["epoch"], state["global_step"]) == (3, 26)
    # its plan says the job's steps before it (issue 48): progress and ETA are the job's, 20 of 26 done at its start
    from gpumon.core.events import EventReader

    plans = {e["src"]: (e["steps"], e.get("done")) for e in EventReader(tmp_path).poll() if e["type"] == "plan"}
    assert plans == {"rank0": (6, 20), "rank1": (6, 20)}, plans


def test_init_from_with_new_head_and_freeze(
    ddp_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """Transfer: 10-class digits weights into a 5-class model; stem and layer1 stay frozen (dp: one process)."""
    run_dir, _ = ddp_run
    source = run_dir / "checkpoints" / "epoch0002.pt"
    synthetic = ["--data", "synthetic", "--samples", "256", "--channels", "1", "--image-size", "8", "--classes", "5"]
    cmd = module("dp", *synthetic, "--epochs", "1", "--init-from", str(source), "--freeze", "stem", "layer1")
    result = run([*cmd, "--checkpoint-dir", str(tmp_path)])
    assert result.returncode == 0, result.stderr
    assert "running the plain model on cpu" in result.stdout
    assert "skipped 2 with different shapes: head.2.bias, head.2.weight" in result.stdout
    model = build_model("tiny", 1, 5, 8)
    frozen = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("stem", "layer1")))
    total = sum(p.numel() for p in model.parameters())
    assert f"frozen {frozen} of {total} parameters" in result.stdout
    before, after = torch.load(source)["model"], torch.load(tmp_path / "epoch0001.pt")["model"]
    for name, _ in model.named_parameters():
        same = torch.equal(before[name], after[name]) if before[name].shape == after[name].shape else False
        assert same == name.startswith(("stem", "layer1")), name


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for name in data.CIFAR_FILES:
        (tmp_path / name).write_bytes(b"this is not a pickle")
    cmds = [
        module("dp", "--data", "cifar10", "--data-dir", str(tmp_path / "missing")),
        module("ddp", "--data", "cifar10", "--data-dir", str(tmp_path)),
        module("model_parallel", "--mode", "pipeline"),
        module("dp", "--batch-size", "0"),
    ]
    (rc1, _, missing), (rc2, _, malformed), (rc3, _, no_torchrun), (rc4, _, bad_arg) = run_all(cmds)
    assert (rc1, rc2, rc3, rc4) == (2, 2, 2, 2)
    assert missing == (
        f"error: CIFAR-10 not found in {tmp_path / 'missing'}: expected data_batch_1 … data_batch_5 and test_batch"
        " from the 'CIFAR-10 python version' archive\n"
    )
    assert (
        malformed.startswith(f"error: CIFAR-10 file {tmp_path / 'data_batch_1'} is not") and malformed.count("\n") == 1
    )
    assert no_torchrun.startswith("error: --mode pipeline runs one process per stage") and no_torchrun.count("\n") == 1
    assert "argument --batch-size: must be a positive integer" in bad_arg


def write_cifar(directory: Path, per_batch: int = 4, override: dict[bytes, object] | None = None) -> None:
    rng = np.random.default_rng(0)
    for name in data.CIFAR_FILES:
        batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8), b"labels": [1] * per_batch}
        (directory / name).write_bytes(pickle.dumps({**batch, **(override or {})}))


def test_cifar10_reads_python_batches(tmp_path: Path) -> None:
    (tmp_path / "cifar-10-batches-py").mkdir()  # the archive's own folder name is accepted too
    write_cifar(tmp_path / "cifar-10-batches-py")
    loaded = data.load("cifar10", data_dir=tmp_path, val_fraction=0.25)
    assert (len(loaded.train), len(loaded.val or []), len(loaded.test or [])) == (15, 5, 4)
    images, labels = loaded.train.tensors
    assert images.shape == (15, 3, 32, 32) and images.dtype == torch.float32 and labels.dtype == torch.int64


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({b"labels": [1]}, "one label per image"),
        ({b"labels": ["cat"] * 4}, "integers 0-9"),
        ({b"data": np.zeros((4, 10), np.uint8)}, "N×3072"),
    ],
)
def test_cifar10_malformed_batches(tmp_path: Path, override: dict[bytes, object], message: str) -> None:
    write_cifar(tmp_path, override=override)
    with pytest.raises(data.DataError, match=message):
        data.load("cifar10", data_dir=tmp_path)


def test_cifar10_refuses_pickled_code(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.mkdir, (str(marker),)  # unpickling would call os.mkdir(marker)

    (tmp_path / "data_batch_3").write_bytes(pickle.dumps({b"data": Payload(), b"labels": [1]}))
    with pytest.raises(data.DataError, match="unexpected object"):
        data.load("cifar10", data_dir=tmp_path)
    assert not marker.exists()


def test_gradient_accumulation_matches_the_full_batch(tmp_path: Path) -> None:
    """--batch-size 16 --accum-steps 4 steps like --batch-size 64 (what an OOM retry with --keep-batch relies on)."""
    import torch
    from torch.utils.data import TensorDataset

    from trainers.cli import make_parser
    from trainers.data import make_loader
    from trainers.loop import Progress, fit
    from trainers.model import MLP

    data = TensorDataset(torch.randn(128, 1, 8, 8), torch.randint(0, 10, (128,)))
    params = []
    for batch, accum in ((64, 1), (16, 4)):
        args = make_parser("t", "t").parse_args(
            ["--batch-size", str(batch), "--accum-steps", str(accum), "--epochs", "1", "--no-checkpoint",
             "--optimizer", "sgd", "--momentum", "0"]
        )  # fmt: skip
        torch.manual_seed(0)
        model = MLP(64, 10, width=32, depth=2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        loader = make_loader(data, batch, shuffle=False)
        progress = fit(
            args, model, optimizer, loader, None, Progress(), input_device=torch.device("cpu"),
            output_device=torch.device("cpu"),
        )  # fmt: skip
        assert progress.global_step == 2  # 128 samples, 64 per optimizer step
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(params[0], params[1], atol=1e-5)
