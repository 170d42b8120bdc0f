"""The rest of issue 37's GPU proof (``pytest -m gpu``; skipped without a GPU): a ``print(loss)`` sync named at
the print, pageable ``non_blocking`` copies found and the pinned twin not, an input-bound CUDA run called
input-bound beside its GPU's utilisation with its time split, the HF Trainer adding no sync through the
hooks, a queued ``--gpu-mem`` run starting within seconds of the memory's release, and a run holding GPU memory
while idle alerted once. The first part is tests/test_gpu_use.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpumon.core.events import EventWriter
from gpumon.core.gpu.idle import IdleWatch
from gpumon.core.gpu.nvml import NvmlSource
from gpumon.core.runs.supervision.gpu_idle import GpuIdleCheck
from tests.conftest import requires_gpu, wait_until
from tests.test_gpu_use import SCRIPT, Gpumon, _doctor, _ended, _run

pytestmark = [pytest.mark.gpu, requires_gpu]
GIB = 1024**3


@pytest.fixture
def on_gpu(tmp_path: Path) -> Gpumon:
    """`gpumon ARGS` with the GPU visible (conftest's ``gpumon`` hides it); the queue settles in 2 s, not 10."""
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "GPUMON_QUEUE_SETTLE_S": "2"}
    env.pop("CUDA_VISIBLE_DEVICES", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, cwd=tmp_path
        )

    return run


def test_a_print_of_the_loss_is_named_at_the_print_not_inside_torch(on_gpu: Gpumon) -> None:
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if text.strip() == "print(loss)")
    row = _run(on_gpu, "print", "60")
    [sync] = [s for s in _doctor(on_gpu, row["id"])["slow"] if s["kind"] == "sync"]
    assert f"gpu_use.py:{line}" in sync["text"] and "_tensor_str" not in sync["text"], sync


def test_pageable_non_blocking_copies_are_found_with_pin_memory_and_the_pinned_twin_is_not(on_gpu: Gpumon) -> None:
    pageable, pinned = _run(on_gpu, "copies", "80"), _run(on_gpu, "copies", "80", "pin")
    found = _doctor(on_gpu, pageable["id"])
    [copy] = [s for s in found["slow"] if s["kind"] == "pageable_copy"]
    assert "(DataLoader pin_memory=False): 16.0 MiB in step" in copy["text"], copy
    assert "1 of them with non_blocking=True" in copy["text"], copy
    assert any(a["key"] == "pin_memory" for a in found["advice"]), found["advice"]
    assert not [s for s in _doctor(on_gpu, pinned["id"])["slow"] if s["kind"] == "pageable_copy"]


def test_an_input_bound_cuda_run_is_called_input_bound_beside_its_gpus_utilisation(on_gpu: Gpumon) -> None:
    row = _run(on_gpu, "feed", "300")  # 80 ms of loading a step, ~1 ms on the GPU: about 25 s, past a look
    [warning] = [w for w in row["warnings"] if w.startswith("input-bound")]
    assert "its GPU 0 is" in warning and "% busy" in warning, warning
    split = row["time_split"]
    assert split["device"].startswith("cuda") and split["data"] >= 0.5, split
    assert split["gpu_busy"] is not None and split["gpu_busy"] + split["data"] + split["host"] == pytest.approx(
        1, abs=0.01
    )


HF = """
import sys, warnings, traceback, torch
from torch import nn
from transformers import Trainer, TrainingArguments

class M(nn.Module):
    def __init__(self):
        super().__init__(); self.net = nn.Linear(256, 256)
    def forward(self, x, labels):
        return {"loss": nn.functional.mse_loss(self.net(x), labels)}

data = [{"x": torch.randn(256), "labels": torch.randn(256)} for _ in range(512)]
seen = {"all": 0, "gpumon": []}
def shown(message, category, filename, lineno, file=None, line=None):
    if "synchronizing" in str(message):
        seen["all"] += 1
        frames = [f"{f.filename}:{f.lineno}" for f in traceback.extract_stack() if "/gpumon/" in f.filename]
        if frames:
            seen["gpumon"].append(frames[-1])
warnings.showwarning = shown
warnings.simplefilter("always")
args = TrainingArguments("out", max_steps=60, per_device_train_batch_size=32, logging_steps=1000, save_strategy="no",
                         report_to=[], logging_nan_inf_filter=False, disable_tqdm=True)
torch.cuda.set_sync_debug_mode("warn")
Trainer(model=M(), args=args, train_dataset=data).train()
torch.cuda.set_sync_debug_mode(0)
print("SYNCS=" + str(seen["all"]), "GPUMON_SYNCS=" + ",".join(seen["gpumon"]) + ";", flush=True)
"""


def test_the_hf_trainer_makes_no_sync_in_gpumons_frames(on_gpu: Gpumon, tmp_path: Path) -> None:
    """The Trainer syncs on its own (its loss reads): under ``set_sync_debug_mode("warn")`` no sync warning's
    stack holds a gpumon frame (the counted step's are caught by gpumon itself, and named in the script)."""
    pytest.importorskip("transformers")
    script = tmp_path / "hf.py"
    script.write_text(HF)
    ended = _ended(on_gpu, "script", str(script))
    run_id = ended["id"]
    log = on_gpu("logs", run_id, "--lines", "400").stdout
    assert "GPUMON_SYNCS=;" in log, log[-2000:]
    assert ended["flops_per_step"], ended  # the hooks did count a step


HOLD = """
import sys, time, torch
free, total = torch.cuda.mem_get_info()
x = torch.empty(int(free - 12 * 2**30), dtype=torch.uint8, device="cuda")  # leaves about 12 GiB free
open(sys.argv[1], "w").close()
while True:
    time.sleep(0.2)
"""


def test_a_queued_gpu_mem_run_waits_while_memory_is_held_and_starts_within_seconds_of_release(
    on_gpu: Gpumon, tmp_path: Path
) -> None:
    ready = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(ready)])
    try:
        assert wait_until(ready.exists, timeout=120), "the holder never allocated"
        os.environ["GPUMON_QUEUE_SETTLE_S"] = "2"  # the launcher's environment, and so the keeper's
        try:
            done = on_gpu(
                "launch", "script", "--queue", "--gpus", "1", "--gpu-mem", "20G", str(SCRIPT), "--", "item", "20"
            )
        finally:
            del os.environ["GPUMON_QUEUE_SETTLE_S"]
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.split()[-1]

        def status() -> str:
            return json.loads(on_gpu("runs", "--json", run_id).stdout)["runs"][0]["status"]

        time.sleep(8)  # the keeper has looked several times: the run must still wait
        assert status() == "queued", status()
    finally:
        holder.kill()
        holder.wait()
    released = time.monotonic()
    assert wait_until(lambda: status() in ("running", "finished"), timeout=60, step=0.2)
    took = time.monotonic() - released
    print(f"queued --gpu-mem run started {took:.1f} s after the memory's release (settle 2 s)")
    assert took < 10, took


IDLE = """
import sys, time, torch
x = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
open(sys.argv[1], "w").close()
time.sleep(600)
"""


def test_a_process_holding_gpu_memory_while_idle_is_alerted_once(tmp_path: Path) -> None:
    """The supervisor's look with the real NVML: the rule's 5 minutes shortened to 3 s (its constructor's)."""
    ready = tmp_path / "held"
    idle = subprocess.Popen([sys.executable, "-c", IDLE, str(ready)])
    try:
        assert wait_until(ready.exists, timeout=120), "the process never allocated"
        check = GpuIdleCheck(NvmlSource, every_s=0.5)
        check.watch = IdleWatch(after_s=3.0)
        (tmp_path / "events").mkdir()
        events, alerts = EventWriter(tmp_path, "launcher"), []
        end = time.monotonic() + 8
        while time.monotonic() < end:
            check.report(time.time(), {idle.pid: 0}, events, lambda text, kind: alerts.append((kind, text)))
            time.sleep(0.5)
        events.close()
        assert [kind for kind, _ in alerts] == ["gpu_idle"], alerts  # once
        assert f"pid {idle.pid}" in alerts[0][1] and "on GPU" in alerts[0][1], alerts
    finally:
        idle.kill()
        idle.wait()
