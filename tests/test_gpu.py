"""On a real GPU: gpumon's NVML readings against nvidia-smi's. Skipped where NVML sees no device."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from gpumon.core.gpu.nvml import NvmlSource, NvmlUnavailable


def _nvml_devices() -> int:
    try:
        source = NvmlSource()
    except NvmlUnavailable:
        return 0
    source.close()
    return source.count


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_nvml_devices() == 0, reason="NVML sees no GPU here"),
]

QUERY = "index,name,uuid,memory.total,memory.used,temperature.gpu,power.limit,clocks.sm"


def smi() -> list[dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    keys = QUERY.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=True)) for line in out.splitlines() if line]


def snapshot() -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "gpumon", "snapshot", "--json"], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def close(a: float, b: float, tolerance: float) -> bool:
    return abs(a - b) <= tolerance


def test_snapshot_matches_nvidia_smi() -> None:
    ours = snapshot()
    theirs = smi()
    assert ours["source"] == "nvml" and ours["reason"] is None
    assert len(ours["devices"]) == len(theirs)
    for dev, ref in zip(ours["devices"], theirs, strict=True):
        assert dev["index"] == int(ref["index"])
        assert dev["name"] == ref["name"]
        assert dev["uuid"] == ref["uuid"]
        assert close(dev["mem_total"] / 2**20, float(ref["memory.total"]), 1)
        assert close(dev["mem_used"] / 2**20, float(ref["memory.used"]), max(64, 0.05 * float(ref["memory.used"])))
        assert close(dev["temperature"], float(ref["temperature.gpu"]), 3)
        if ref["power.limit"] not in ("[N/A]", "[Not Supported]"):
            assert close(dev["power_limit"], float(ref["power.limit"]), 1)
        assert dev["sm_clock"] is not None


def test_a_cuda_process_appears_with_its_memory() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    code = (
        "import torch, time, sys; x = torch.empty(512 * 2**20, dtype=torch.uint8, device='cuda:0');"
        "torch.cuda.synchronize(); print('ready', flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        procs = [p for p in snapshot()["processes"] if p["pid"] == child.pid]
        assert procs, "the CUDA child is not in gpumon's process list"
        assert procs[0]["gpu_index"] == 0
        if procs[0]["used_memory"] is not None:  # N/A under MIG
            assert procs[0]["used_memory"] >= 512 * 2**20
        assert "python" in (procs[0]["command"] or "")
    finally:
        child.kill()
        child.wait()
