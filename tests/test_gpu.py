"""On a real GPU: gpumon's NVML readings against nvidia-smi's, its process table, signals and the app.

``pytest -m gpu`` runs this suite and tests/test_gpu_runs.py; both skip, saying why, where NVML sees
no device. Tolerances are in gpumon/core/gpu/crosscheck.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.gpu.crosscheck import APP_FIELDS, GPU_FIELDS, compare_device, compare_processes, run_smi
from gpumon.core.gpu.nvml import NvmlSource
from gpumon.core.model import GpuProcess
from gpumon.core.signals import send_signal
from tests.conftest import requires_gpu, wait_until

pytestmark = [pytest.mark.gpu, requires_gpu]

# A process that holds 2 GiB on GPU 0 and then multiplies matrices until it is told to stop.
BUSY = """
import time, torch
held = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda:0")
a = torch.randn(4096, 4096, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
end = time.time() + 180
while time.time() < end:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
"""


def snapshot() -> dict:
    out = subprocess.run([sys.executable, "-m", "gpumon", "snapshot", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def needs_smi() -> None:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")


def needs_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[str]]:
    needs_cuda()
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_every_panel_field_matches_nvidia_smi_read_in_the_same_second() -> None:
    needs_smi()
    ours = snapshot()
    theirs = run_smi(k for k, _ in GPU_FIELDS)
    assert ours["source"] == "nvml" and ours["reason"] is None
    assert len(ours["devices"]) == len(theirs)
    checks = [c for dev, row in zip(ours["devices"], theirs, strict=True) for c in compare_device(dev, row)]
    assert all(c.ok for c in checks), "\n".join(c.line() for c in checks)


def test_process_list_matches_nvidia_smi_while_a_cuda_process_runs(busy: subprocess.Popen[str]) -> None:
    needs_smi()
    ours = snapshot()
    theirs = run_smi(APP_FIELDS, apps=True)
    uuids = {d["uuid"]: d["index"] for d in ours["devices"]}
    checks = compare_processes(ours["processes"], theirs, uuids)
    assert any(str(busy.pid) in c.what for c in checks)
    assert all(c.ok for c in checks), "\n".join(c.line() for c in checks)


def test_a_busy_process_shows_its_pid_memory_and_sm_use_and_sigterm_from_gpumon_ends_it(
    busy: subprocess.Popen[str],
) -> None:
    source = NvmlSource()
    try:

        def computing() -> GpuProcess | None:
            procs = [p for d in source.sample().devices for p in d.processes if p.pid == busy.pid]
            return procs[0] if procs and (procs[0].sm_util or 0) > 0 else None

        proc = wait_until(computing, timeout=15, step=0.5)
        assert proc is not None, "the busy process never showed SM use above 0"
        assert proc.gpu_index == 0 and "python" in (proc.command or "")
        if proc.used_memory is not None:  # N/A under MIG
            needs_smi()
            (row,) = [a for a in run_smi(APP_FIELDS, apps=True) if a["pid"] == busy.pid]
            assert abs(proc.used_memory / 2**20 - row["used_memory"]) <= 0.05 * row["used_memory"]
            assert proc.used_memory >= 2 * 2**30
        outcome = send_signal(proc, signal.SIGTERM)
        assert outcome.ok, outcome.message
        assert busy.wait(timeout=20) == -signal.SIGTERM
    finally:
        source.close()


def test_app_in_tmux_shows_nvidia_smis_memory_and_names_a_runs_rank(tmp_path, monkeypatch) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed")
    needs_smi()
    needs_cuda()
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, stop
    from gpumon.tui.widgets.render import short_run_id
    from tests.tmux_term import Tmux

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    store = RunStore()
    spec = RunSpec(kind="ddp", nproc=1, args=("--device", "cuda", "--epochs", "100000", "--preset", "small"))
    record = launch(spec, store, 1)
    term = Tmux(200, 50)
    try:
        assert wait_until(lambda: any(p["pid"] for p in snapshot()["processes"]), timeout=90, step=1)
        term.start([sys.executable, "-m", "gpumon"])
        screen = term.wait_for("GPU", short_run_id(record.id), timeout=30)
        (row,) = run_smi(["memory.used", "memory.total"])
        shown = re.search(r"┃ MEM .*?([\d.]+)/([\d.]+) GiB", screen)  # GPU 0's panel (the host panel is above)
        assert shown, screen
        used_gib, total_gib = float(shown.group(1)), float(shown.group(2))
        assert abs(total_gib - row["memory.total"] / 1024) <= 0.1
        assert abs(used_gib - row["memory.used"] / 1024) <= 0.5, screen  # the run's memory moves between reads
        assert f"{short_run_id(record.id)} r0" in screen, screen  # the rank, not only the run
    finally:
        if os.environ.get("GPUMON_SCREEN_OUT"):  # the GPU machine's run keeps what the app showed
            Path(os.environ["GPUMON_SCREEN_OUT"]).write_text(term.screen())
        term.run("kill-server")
        stop(store.load(record.dir) or record, kill=True)
