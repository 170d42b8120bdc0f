"""On a real GPU (``pytest -m gpu``): is the GPU used well (issue 37). MFU of a bf16 matmul loop against the
analytic figure and torch.utils.benchmark's timing; SM activity of a busy kernel against a single-thread spin
kernel that both read 100% utilisation; TF32 off found on an fp32 model; a ``.item()`` per step named at its
line; gpumon's hooks add no host-device sync (``set_sync_debug_mode("error")`` through a plain loop and
Lightning). Skips, saying why, where NVML sees no GPU."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from gpumon.core.gpu.peaks import dense_peaks
from tests.conftest import requires_gpu, wait_until

pytestmark = [pytest.mark.gpu, requires_gpu]
SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "gpu_use.py"
Gpumon = Callable[..., CompletedProcess[str]]


@pytest.fixture
def on_gpu(tmp_path: Path) -> Gpumon:
    """`gpumon ARGS` with the GPU visible (conftest's ``gpumon`` hides it)."""
    import os

    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
    env.pop("CUDA_VISIBLE_DEVICES", None)

    def run(*args: str) -> CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, cwd=tmp_path
        )

    return run


def _ended(gpumon: Gpumon, *launch: str) -> dict[str, Any]:
    """`gpumon launch LAUNCH...`, then the run's row once it has ended: it must have finished (else its logs)."""
    done = gpumon("launch", *launch)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]

    def row() -> dict[str, Any] | None:
        found = {r["id"]: r for r in json.loads(gpumon("runs", "--json").stdout)["runs"]}
        return found[run_id] if found.get(run_id, {}).get("status") in ("finished", "failed") else None

    ended = wait_until(row, timeout=600, step=1.0)
    assert ended, "the run did not end"
    logs = "".join(p.read_text(errors="replace")[-3000:] for p in Path(ended["dir"], "logs").glob("*.log"))
    assert ended["status"] == "finished", logs
    return ended


def _run(gpumon: Gpumon, *args: str) -> dict[str, Any]:
    """gpu_use.py ARGS through `gpumon launch script`, once it has finished."""
    return _ended(gpumon, "script", str(SCRIPT), "--", *args)


def _doctor(gpumon: Gpumon, run_id: str) -> dict[str, Any]:
    return json.loads(gpumon("doctor", run_id, "--json").stdout)


def test_mfu_of_a_bf16_matmul_loop_matches_the_analytic_figure_and_torchs_benchmark(
    on_gpu: Gpumon, tmp_path: Path
) -> None:
    out = tmp_path / "own.json"
    row = _run(on_gpu, "matmul", "20", str(out))
    own = json.loads(out.read_text())
    assert row["flops_method"] == "counted" and row["flops_dtype"] == "bf16", row
    assert abs(row["flops_per_step"] - own["analytic"]) <= 0.1 * own["analytic"], (row["flops_per_step"], own)
    achieved = row["achieved_flops_per_s"]
    print(
        f"gpumon {achieved / 1e12:.1f} TFLOP/s (MFU {row['mfu']}); script {own['own_flops_per_s'] / 1e12:.1f}; "
        f"torch.utils.benchmark {own['benchmark_flops_per_s'] / 1e12:.1f}"
    )
    assert abs(achieved - own["own_flops_per_s"]) <= 0.1 * own["own_flops_per_s"]
    assert abs(achieved - own["benchmark_flops_per_s"]) <= 0.1 * own["benchmark_flops_per_s"]
    name = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"], capture_output=True, text=True
    ).stdout.strip()
    peaks = dense_peaks(name)
    if peaks is None:
        assert row["mfu"] is None and name in row["mfu_reason"]
    else:
        assert row["mfu"] == pytest.approx(achieved / peaks["bf16"], rel=1e-6)


def _sm_active_while(mode: str) -> tuple[float, float]:
    """(gpu_util %, sm_active 0..1) of GPU 0 from `gpumon snapshot --json` (the median of 3), while ``mode`` runs."""
    proc = subprocess.Popen([sys.executable, str(SCRIPT), mode, "30"])
    try:
        time.sleep(8)  # the kernels run; NVML's utilisation window is up to a second
        readings = []
        for _ in range(3):
            out = subprocess.run([sys.executable, "-m", "gpumon", "snapshot", "--json"], capture_output=True, text=True)
            dev = json.loads(out.stdout)["devices"][0]
            if dev["sm_active"] is None:
                pytest.skip(f"GPM gives no SM activity here: {dev['na'].get('sm_active')}")
            readings.append((dev["gpu_util"], dev["sm_active"]))
            time.sleep(1)
        return sorted(r[0] for r in readings)[1], sorted(r[1] for r in readings)[1]
    finally:
        proc.kill()
        proc.wait()


def test_sm_activity_tells_a_busy_kernel_from_a_single_thread_that_reads_100_percent_too() -> None:
    busy_util, busy_sm = _sm_active_while("busy")
    trickle_util, trickle_sm = _sm_active_while("trickle")
    print(f"busy: util {busy_util}% SM active {busy_sm:.0%}; trickle: util {trickle_util}% SM active {trickle_sm:.1%}")
    assert busy_util >= 90 and trickle_util >= 90  # utilisation cannot tell them apart
    assert busy_sm >= 0.5 and trickle_sm <= 0.05


def test_fp32_with_tf32_off_is_found_and_its_tf32_twin_is_not(on_gpu: Gpumon) -> None:
    off, high = _run(on_gpu, "fp32", "200"), _run(on_gpu, "fp32", "200", "high")
    found = [s for s in _doctor(on_gpu, off["id"])["slow"] if s["kind"] == "tf32_off"]
    assert found and "float32 matmuls with TF32 off" in found[0]["text"], _doctor(on_gpu, off["id"])
    assert not [s for s in _doctor(on_gpu, high["id"])["slow"] if s["kind"] == "tf32_off"]


def test_an_item_per_step_is_named_at_its_line(on_gpu: Gpumon) -> None:
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "total += loss.item()" in text)
    row = _run(on_gpu, "item", "200")
    [sync] = [s for s in _doctor(on_gpu, row["id"])["slow"] if s["kind"] == "sync"]
    assert f"gpu_use.py:{line}" in sync["text"], sync


def test_the_zero_code_hooks_add_no_sync_under_sync_debug_mode_error(on_gpu: Gpumon) -> None:
    row = _run(on_gpu, "strict", "300")  # any sync in the loop, ours included, raises and fails the run
    assert row["flops_per_step"] and row["step"] == 300


LIGHTNING = """
import torch, lightning as L
torch.cuda.set_sync_debug_mode("error")
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.net = torch.nn.Linear(512, 512)
    def training_step(self, batch, i):
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
data = [(torch.randn(512), torch.randn(512)) for _ in range(512)]
L.Trainer(max_steps=100, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False,
          enable_progress_bar=False).fit(M(), torch.utils.data.DataLoader(data, batch_size=32))
"""


def test_lightning_under_sync_debug_mode_error_runs_with_the_hooks(on_gpu: Gpumon, tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    script = tmp_path / "lit.py"
    script.write_text(LIGHTNING)
    _ended(on_gpu, "script", str(script))
