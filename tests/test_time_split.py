"""Where the step's time goes (issue 37 item 4): one bar in the Runs detail, the same shares in ``gpumon runs
--json RUN``. A real CPU run fed by a slow DataLoader (its own measured wait is the reference) and a recorded
CUDA rank's events (its data wait, its GPU's NVML utilisation, the syncs of its counted step)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from gpumon.core.events import EventWriter, encode
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import write_json
from gpumon.tui.views.runs.time_bar import time_bar
from tests.conftest import wait_ended

SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"
Gpumon = Callable[..., CompletedProcess[str]]
GIB = 2**30


def _row(gpumon: Gpumon, run_id: str) -> dict[str, Any]:
    # the end read here (conftest.wait_ended), then the CLI asked once: not a `gpumon runs` every second
    wait_ended(gpumon.home, run_id, timeout=300)  # type: ignore[attr-defined]
    [found] = json.loads(gpumon("runs", "--json", run_id).stdout)["runs"]
    assert found.get("status") in ("finished", "failed"), found
    return found


def test_a_cpu_run_fed_by_a_slow_loader_splits_its_time_into_the_wait_it_measured_and_the_host(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    done = gpumon("launch", "script", str(SCRIPTS / "slow_feed.py"), "--", "--steps", "150")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    row = _row(gpumon, run_id)
    assert row["status"] == "finished", row
    log = gpumon("logs", run_id, "--lines", "200").stdout
    own = float(re.search(r"OWN_WAIT_SHARE=([0-9.]+)", log).group(1))  # type: ignore[union-attr]
    split = row["time_split"]
    assert split["device"] == "cpu" and split["rank"] == 0, split
    assert abs(split["data"] - own) <= 0.1, (split, own)  # the script's own clock around next(loader)
    assert 0.1 < own < 0.9, own  # ~50 ms of loading against ~30 ms of work (longer on a loaded machine)
    assert split["host"] == pytest.approx(1 - split["data"], abs=0.002)
    # No GPU: no share invented for it, the reason given instead.
    assert split["gpu_busy"] is None and split["sync"] is None
    assert split["unknown"]["gpu_busy"] == "a CPU run: no GPU"
    bar = time_bar(split)
    assert bar is not None
    assert f"data {split['data']:.0%} · host {split['host']:.0%}" in bar.plain
    assert "GPU busy" not in bar.plain and "(a CPU run: the host computes the step)" in bar.plain


def _record_cuda(home: Path, run_id: str, util: float | None, wait: float, syncs: int | None) -> None:
    """A finished CUDA rank: 60 steps of 0.5 s from t=1000 s, each waiting ``wait`` s for the DataLoader, its
    GPU ``util``% busy as the supervisor saw it, one counted step with ``syncs`` syncs."""
    run_dir = home / "runs" / run_id
    (run_dir / "logs").mkdir(parents=True)
    write_json(run_dir / "spec.json", RunSpec("script", program="train.py", cwd="/tmp").to_dict())
    write_json(run_dir / "status.json", {"state": "finished", "created": 1.0, "started": 2.0, "ended": 1100.0})
    w = EventWriter(run_dir, "rank0")

    def put(kind: str, t: float, **fields: Any) -> None:
        w.write_line(encode(kind, "rank0", fields, now=t))

    put("proc_start", 1000.0, rank=0)
    put("device", 1000.0, dev="cuda:0", name="NVIDIA H100 80GB HBM3", total=80 * GIB)
    put("dataloader", 1000.0, num_workers=0, batch_size=32, pin_memory=False)
    for step in range(1, 61):
        t = 1000.0 + 0.5 * step
        put("step", t, step=step, dt=0.5, dev="cuda:0", alloc=GIB, reserved=2 * GIB, peak=2 * GIB, wait=wait)
        if step == 4:
            sync = {"syncs": syncs, "sync_sites": [{"site": "train.py:42", "count": syncs}]} if syncs else {}
            put("flops", t, step=4, method="counted", dev="cuda:0", flops=1e12, dtypes={"bf16": 1e12}, **sync)
    if util is not None:
        put("gpu_use", 1030.0, rank=0, pid=1, gpu=0, util=util)
    w.close()


def test_a_recorded_cuda_rank_splits_the_gpus_time_into_busy_data_and_host(gpumon: Gpumon, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _record_cuda(home, "script-1127-070000-aaaa", util=55.0, wait=0.15, syncs=3)
    split = json.loads(gpumon("runs", "--json", "script-1127-070000-aaaa").stdout)["runs"][0]["time_split"]
    # 0.15 s of each 0.5 s step waits for data: 30%; the GPU is 55% busy; the rest, 15%, is the host's.
    assert split["gpu_busy"] == 0.55 and split["data"] == 0.3 and split["host"] == 0.15, split
    assert split["sync"] is None and split["syncs_per_step"] == 3
    assert split["unknown"]["sync"] == "3 sync(s) in the counted step (train.py:42): their time is in host"
    bar = time_bar(split)
    assert bar is not None
    assert bar.plain.endswith("GPU busy 55% · data 30% · host 15% · sync ? (3/step, in host)")
    cells = "█" * round(0.55 * 24) + "▓" * round(0.3 * 24) + "▒" * round(0.15 * 24)  # busy, data, host
    assert bar.plain.startswith(f"step time {cells} ")

    # A GPU busy 90% while the host waits 30% for data: the GPU ran queued work meanwhile; the idle 10% is data's.
    _record_cuda(home, "script-1127-070000-bbbb", util=90.0, wait=0.15, syncs=0)
    split = json.loads(gpumon("runs", "--json", "script-1127-070000-bbbb").stdout)["runs"][0]["time_split"]
    assert (split["gpu_busy"], split["data"], split["host"]) == (0.9, 0.1, 0.0), split

    # No NVML reading yet: busy and host are unknown, and say so; the data wait is still known.
    _record_cuda(home, "script-1127-070000-cccc", util=None, wait=0.15, syncs=None)
    split = json.loads(gpumon("runs", "--json", "script-1127-070000-cccc").stdout)["runs"][0]["time_split"]
    assert split["gpu_busy"] is None and split["host"] is None and split["data"] == 0.3, split
    assert split["unknown"]["gpu_busy"].startswith("no NVML utilisation of its GPU yet")
    assert "GPU busy ? · data 30% · host ? · sync ?" in time_bar(split).plain  # type: ignore[union-attr]
