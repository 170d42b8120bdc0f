"""Issue 52 on CUDA (``pytest -m gpu``; skipped without a GPU): the window records PyTorch's memory history, names
the line whose CUDA blocks grow, and keeps the snapshot with the run for memory_viz (telemetry/cuda_history.py); a
real OOM in a launched run shows its largest block's line in the doctor (tests/test_oom_allocator.py reads the same
events replayed on a CPU)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpumon.core.doctor.causes import name_causes
from gpumon.core.protocol import request_pymem
from gpumon.core.runs.reading.cuda_snapshot import load, summarise
from tests.conftest import requires_gpu, wait_until

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_a_window_on_a_cuda_rank_names_the_line_whose_blocks_grow_and_keeps_the_snapshot(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    from gpumon.telemetry.pymem import PyMemTrigger

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # CUDA initialised, as in a training rank
    written: list[dict] = []
    kept: list = [torch.empty(0, device="cuda") for _ in range(8)]
    trigger = PyMemTrigger(str(tmp_path), time.time_ns() - 10**9, lambda: 0, torch)
    request_pymem(tmp_path, [0], steps=5)
    for step in range(1, 9):
        kept.append(torch.empty(4 * 2**20, dtype=torch.uint8, device="cuda"))  # 4 MiB a step, kept
        trigger.at_step(step, float(step), lambda kind, **f: written.append({"type": kind, "src": "rank0", **f}))
    assert written and not written[0].get("error"), written
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "4 MiB a step, kept" in text)
    cuda = written[0]["cuda_lines"]
    assert cuda and cuda[0]["file"] == Path(__file__).name and cuda[0]["line"] == line, cuda
    assert cuda[0]["bytes"] >= 5 * 4 * 2**20, cuda
    snapshot = tmp_path / written[0]["cuda_snapshot"]
    assert "segments" in pickle.loads(snapshot.read_bytes())
    read = summarise(load(snapshot))  # gpumon's own reader takes the real pickle (plain data only), by the same line
    assert any(s["file"] == Path(__file__).name and s["line"] == line for s in read["stacks"]), read["stacks"]
    causes = name_causes(written)[0]
    assert any(c.kind == "cuda_allocations" and f":{line}" in c.title for c in causes), causes
    torch.cuda.memory._record_memory_history(enabled=None)  # (stopped already: a second stop is harmless)


def test_a_cuda_out_of_memory_keeps_the_allocators_snapshot_with_its_largest_blocks(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    from gpumon.telemetry import cuda_history

    held = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")  # the largest block at the OOM
    written: list[dict] = []
    assert cuda_history.watch_oom(
        torch, str(tmp_path), lambda: 0, lambda kind, **f: written.append({"type": kind, **f})
    )
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(2**50, dtype=torch.uint8, device="cuda")  # more than any GPU has
    assert len(written) == 1 and written[0]["type"] == "oom_snapshot", written
    assert written[0]["largest"][0]["size"] >= held.numel(), written
    assert "segments" in pickle.loads((tmp_path / written[0]["snapshot"]).read_bytes())


OOM_SCRIPT = """
import torch
model = torch.nn.Linear(256, 256).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
held = []
for step in range(4):
    model(torch.randn(8, 256, device="cuda")).sum().backward()
    optimizer.step()
    if step == 1:
        held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))  # the largest block: 1 GiB, kept
    if step == 3:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # more than any GPU has: the OOM
"""


def test_a_real_cuda_oom_in_a_run_shows_its_largest_blocks_line_in_the_doctor(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    script = tmp_path / "oom_train.py"
    script.write_text(OOM_SCRIPT)
    line = next(n for n, text in enumerate(OOM_SCRIPT.splitlines(), 1) if "the largest block" in text)
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}

    def gpumon(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    run_id = gpumon("launch", "script", "--env", "GPUMON_OOM_STACKS=1", str(script)).split()[-1]
    assert wait_until(lambda: json.loads(gpumon("runs", "--json"))["runs"][0]["status"] == "failed", timeout=120)
    doctor = json.loads(gpumon("doctor", run_id, "--json"))
    failure = doctor["failure"]
    assert failure["kind"] == "cuda_oom", failure
    top = failure["snapshot"]["largest"][0]
    assert (top["size"], top["file"], top["line"]) == (1 << 30, "oom_train.py", line), failure["snapshot"]
    assert (Path(failure["snapshot"]["path"])).exists()
    text = gpumon("doctor", run_id)
    print(text)  # for docs/gpu.md
    assert f"largest blocks at the OOM (rank 0, cuda:0): 1024.00 MiB oom_train.py:{line}" in text, text
    # the real kept pickle, read by gpumon's own reader (plain data only: no global refused in it), no browser
    (kept,) = json.loads(gpumon("doctor", run_id, "--snapshot", "oom0.pickle", "--json"))["snapshots"]
    assert kept["path"] == failure["snapshot"]["path"] and "error" not in kept, kept
    summary = kept["summary"]
    assert summary["devices"][0]["allocated"] >= 1 << 30, summary["devices"]
    assert (summary["largest"][0]["size"], summary["largest"][0]["file"]) == (1 << 30, "oom_train.py"), summary
    assert (summary["stacks"][0]["file"], summary["stacks"][0]["line"]) == ("oom_train.py", line), summary["stacks"]
    assert f"oom_train.py:{line}" in gpumon("doctor", run_id, "--snapshot")
