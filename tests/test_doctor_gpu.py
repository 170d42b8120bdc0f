"""The doctor's GPU-side slow run (issue 37 item 4) from recorded measurements: the events a CUDA rank writes
(``flops`` with its dtypes and counted syncs, ``step`` with ``gpu_dry`` and peak memory, ``device``), read back by
``gpumon doctor --json`` as a user runs it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from gpumon.core.events import EventReader, EventWriter, encode
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import write_json
from tests.conftest import wait_ended

Gpumon = Callable[..., CompletedProcess[str]]
GIB = 2**30
H100 = "NVIDIA H100 80GB HBM3"


def record(
    home: Path,
    run_id: str,
    name: str,
    flops: dict[str, Any],
    dry: float | None = None,
    peak: int = 40 * GIB,
    loader: dict[str, Any] | None = None,
) -> None:
    """A finished CUDA run: 40 steps of 0.5 s, one counted step (``flops``), its device and memory."""
    run_dir = home / "runs" / run_id
    (run_dir / "logs").mkdir(parents=True)
    write_json(run_dir / "spec.json", RunSpec("script", program="train.py", cwd="/tmp").to_dict())
    write_json(run_dir / "status.json", {"state": "finished", "created": 1.0, "started": 2.0, "ended": 60.0})
    w = EventWriter(run_dir, "rank0")
    w.write("proc_start", rank=0)
    w.write("device", dev="cuda:0", name=name, total=80 * GIB)
    if loader:
        w.write("dataloader", **loader)
    for step in range(1, 41):
        extra = {"gpu_dry": dry} if dry is not None and step > 1 else {}
        fields = {"step": step, "dt": None if step == 1 else 0.5, "dev": "cuda:0", "alloc": peak // 2}
        fields |= {"reserved": peak, "peak": peak, **extra}
        w.write_line(encode("step", "rank0", fields, now=1000.0 + 0.5 * step))  # 0.5 s apart by their clock too
        if step == 4:
            w.write("flops", step=4, method="counted", dev="cuda:0", **flops)
    w.close()


def doctor(gpumon: Gpumon, run_id: str) -> dict[str, Any]:
    done = gpumon("doctor", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_fp32_matmuls_with_tf32_off_on_an_a100_are_named_with_the_gain(gpumon: Gpumon, tmp_path: Path) -> None:
    # 2e12 fp32 FLOPs a step: at least 0.1 s of a 0.5 s step at the A100's 19.5 TFLOP/s fp32 peak.
    record(
        tmp_path / "home", "script-1127-050000-aaaa", "NVIDIA A100-SXM4-80GB", {"flops": 2e12, "dtypes": {"fp32": 2e12}}
    )
    found = doctor(gpumon, "script-1127-050000-aaaa")
    [tf32] = [s for s in found["slow"] if s["kind"] == "tf32_off"]
    assert tf32["text"].startswith("float32 matmuls with TF32 off on NVIDIA A100-SXM4-80GB: 100% of the step's FLOPs")
    assert "fp32 peak 20 TFLOP/s, where TF32 runs 156 (8.0x) and bf16 312" in tf32["text"]
    assert tf32["cost"] > 0.15  # 0.1 s of 0.5 s, 7/8 of it saved
    [advice] = [a for a in found["advice"] if a["key"] == "tf32"]
    assert "torch.set_float32_matmul_precision('high')" in advice["change"]
    # The same FLOPs in bf16 is no finding; nor on a GPU whose table has no TF32 (a V100).
    record(
        tmp_path / "home", "script-1127-050000-bbbb", "NVIDIA A100-SXM4-80GB", {"flops": 2e12, "dtypes": {"bf16": 2e12}}
    )
    record(
        tmp_path / "home", "script-1127-050000-cccc", "Tesla V100-SXM2-16GB", {"flops": 2e12, "dtypes": {"fp32": 2e12}}
    )
    for run_id in ("script-1127-050000-bbbb", "script-1127-050000-cccc"):
        assert not [s for s in doctor(gpumon, run_id)["slow"] if s["kind"] == "tf32_off"]


def test_a_sync_per_step_is_named_at_its_line_before_a_small_batch(gpumon: Gpumon, tmp_path: Path) -> None:
    flops = {"flops": 1e13, "dtypes": {"bf16": 1e13}, "syncs": 2, "sync_sites": [{"site": "train.py:42", "count": 2}]}
    record(tmp_path / "home", "script-1127-050000-dddd", H100, flops, dry=0.9, peak=4 * GIB, loader={"batch_size": 16})
    found = doctor(gpumon, "script-1127-050000-dddd")
    kinds = [s["kind"] for s in found["slow"]]
    assert kinds == ["sync", "small_batch"], found["slow"]  # ranked by what each costs
    assert found["headline"] == "a device-to-host sync every step: 2 in step 4 on rank 0, at train.py:42 (2x)"
    assert found["slow"][1]["text"] == (
        "batch far below memory: rank 0's step peaks at 4.0 GiB of 80.0 GiB (5%) while MFU is 2%"
    )
    keys = [a["key"] for a in found["advice"]]
    assert keys.index("sync") < keys.index("batch_size_up")
    [bigger] = [a for a in found["advice"] if a["key"] == "batch_size_up"]
    assert bigger["change"].startswith("batch_size=256 or less (now 16")  # 16 x 0.8 x 80 GiB / 4 GiB


def test_a_gpu_that_runs_dry_every_step_without_a_sync_is_host_bound(gpumon: Gpumon, tmp_path: Path) -> None:
    record(tmp_path / "home", "script-1127-050000-eeee", H100, {"flops": 1e12, "dtypes": {"bf16": 1e12}}, dry=0.95)
    found = doctor(gpumon, "script-1127-050000-eeee")
    [host] = [s for s in found["slow"] if s["kind"] == "host_bound"]
    assert host["text"].startswith("host-bound: in 95% of rank 0's steps the GPU had finished the step before")
    assert "(MFU 0%)" in host["text"]
    assert any(a["key"] == "compile" and "torch.compile" in a["change"] for a in found["advice"])
    # The GPU still busy when the host queued the next step: no finding.
    record(tmp_path / "home", "script-1127-050000-ffff", H100, {"flops": 4e14, "dtypes": {"bf16": 4e14}}, dry=0.1)
    assert doctor(gpumon, "script-1127-050000-ffff")["slow"] == []


MB = 10**6


def test_pageable_copies_from_a_loader_without_pinned_memory_are_found_with_pin_memory_first(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    # 200 MB copied from pageable memory in a 0.5 s step: about 20 ms at 10 GB/s, 4% of the step; 3 asked
    # non_blocking=True. The loader the hooks saw says pin_memory=False: the fix names it.
    h2d = {"copies": 3, "bytes": 200 * MB, "pageable_bytes": 200 * MB, "pageable_non_blocking": 3}
    flops = {"flops": 4e14, "dtypes": {"bf16": 4e14}, "h2d": h2d}
    loader = {"batch_size": 64, "num_workers": 4, "pin_memory": False}
    record(tmp_path / "home", "script-1127-060000-aaaa", H100, flops, dry=0.1, loader=loader)
    found = doctor(gpumon, "script-1127-060000-aaaa")
    [copy] = [s for s in found["slow"] if s["kind"] == "pageable_copy"]
    assert copy["text"] == (
        "host-to-device copies from memory that is not pinned (DataLoader pin_memory=False): 190.7 MiB in step 4 "
        "on rank 0, 3 of them with non_blocking=True, which a pageable copy ignores; the host waits for each, about "
        "20.0 ms of the 500 ms step at 10 GB/s (an estimate: copies are not timed)"
    ), copy
    assert copy["cost"] == pytest.approx(0.04)
    first = found["advice"][0]
    assert first["key"] == "pin_memory" and first["change"].startswith("DataLoader(..., pin_memory=True)"), first

    # Ranked with the others by cost: a sync every step costs more (the GPU ran dry 90% of steps) and comes first.
    sync = {"syncs": 1, "sync_sites": [{"site": "train.py:42", "count": 1}]}
    record(tmp_path / "home", "script-1127-060000-bbbb", H100, {**flops, **sync}, dry=0.9, loader=loader)
    kinds = [s["kind"] for s in doctor(gpumon, "script-1127-060000-bbbb")["slow"]]
    assert kinds.index("sync") < kinds.index("pageable_copy"), kinds

    # Pinned copies on the default stream: their own finding and fix; a few MB a step: nothing.
    pinned = {"copies": 2, "bytes": 500 * MB, "default_stream_bytes": 500 * MB}
    record(tmp_path / "home", "script-1127-060000-cccc", H100, {**flops, "h2d": pinned}, dry=0.1)
    found = doctor(gpumon, "script-1127-060000-cccc")
    assert [s["kind"] for s in found["slow"]] == ["default_stream_copy"], found["slow"]
    assert found["advice"][0]["key"] == "copy_stream"
    small = {"copies": 1, "bytes": 2 * MB, "pageable_bytes": 2 * MB}
    record(tmp_path / "home", "script-1127-060000-dddd", H100, {**flops, "h2d": small}, dry=0.1, loader=loader)
    assert doctor(gpumon, "script-1127-060000-dddd")["slow"] == []


def test_a_cpu_run_with_pin_memory_false_reports_its_loader_and_no_copy_finding(gpumon: Gpumon) -> None:
    """A real script: the hooks see the DataLoader's pin_memory=False; on a CPU nothing is copied to a GPU, so
    the rule says nothing (pinning would not help)."""
    pytest.importorskip("torch")
    scripts = Path(__file__).resolve().parent / "data" / "scripts"
    done = gpumon("launch", "script", str(scripts / "slow_feed.py"), "--", "--steps", "40")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]

    wait_ended(gpumon.home, run_id, timeout=300)  # type: ignore[attr-defined]  # read here: not a CLI a second
    [row] = json.loads(gpumon("runs", "--json", run_id).stdout)["runs"]
    assert row["status"] in ("finished", "failed"), row
    run_dir = Path(row["dir"])
    [loader] = [e for e in EventReader(run_dir).each() if e["type"] == "dataloader"]
    assert loader["pin_memory"] is False and loader["batch_size"] == 8
    [count] = [e for e in EventReader(run_dir).each() if e["type"] == "flops"]
    assert "h2d" not in count  # no copy to a GPU in the counted step
    found = doctor(gpumon, run_id)
    assert not [s for s in found["slow"] if s["kind"] in ("pageable_copy", "default_stream_copy")]
