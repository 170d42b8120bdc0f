"""Issue 24: failures that read "unknown" before, from real processes launched by gpumon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.doctor.oom_evidence import NEAR_LIMIT, kernel_oom_lines, memory_limit, oom_evidence
from gpumon.core.runs.record.store import RunStore
from tests.conftest import wait_until

EXIT_3 = """
import sys
print("loading config", flush=True)
print("error: config.yaml has no 'model' section", file=sys.stderr)
sys.exit(3)
"""
WORKER = """
import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, idx):
        if idx == 7:
            raise ValueError(f"corrupt sample at index {idx}")
        return torch.zeros(4)


for batch in DataLoader(Samples(), batch_size=4, num_workers=2):
    pass
"""
SLEEPER = """
import time
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=180)


def launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> str:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    script = tmp_path / "train.py"
    script.write_text(source)
    started = gpumon("launch", "script", str(script), "--env", "OMP_NUM_THREADS=1")
    assert started.returncode == 0, started.stderr
    return started.stdout.split()[-1]


def ended(run_id: str) -> dict:
    assert wait_until(lambda: RunStore().resolve(run_id).state == "failed", timeout=120)
    return json.loads(gpumon("doctor", run_id, "--json").stdout)


def test_an_exit_3_is_told_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = launch(tmp_path, monkeypatch, EXIT_3)
    doc = ended(run_id)
    reason = "loading config | error: config.yaml has no 'model' section"
    assert doc["headline"] == f"the script exited with status 3: {reason}"
    assert doc["failure"]["kind"] == "exit" and doc["advice"][0]["key"] == "exit_reason"
    assert f"the script exited with status 3: {reason}" in gpumon("doctor", run_id).stdout.splitlines()[0]


def test_a_dataloader_worker_exception_names_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    run_id = launch(tmp_path, monkeypatch, WORKER)
    doc = ended(run_id)
    failure = doc["failure"]
    assert (failure["kind"], failure["sample"]) == ("worker", 7) and failure["worker"] in (0, 1)
    assert doc["headline"] == f"DataLoader worker {failure['worker']} raised ValueError: corrupt sample at index 7"
    assert "train.py:12 in __getitem__" in failure["detail"]
    assert [a["key"] for a in doc["advice"]] == ["workers_zero", "bad_sample"]
    assert "num_workers=0" in doc["advice"][0]["title"]


def test_a_rank_killed_by_someone_is_not_called_oom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = launch(tmp_path, monkeypatch, SLEEPER)
    log = RunStore().resolve(run_id).log_path(0)
    assert wait_until(lambda: log.exists() and "ready" in log.read_text(), timeout=60)
    os.kill(int(RunStore().resolve(run_id).status["pid"]), signal.SIGKILL)  # a user's kill -9, not the kernel's
    doc = ended(run_id)
    assert doc["failure"]["kind"] == "killed" and doc["failure"]["signal"] == "SIGKILL"
    assert doc["headline"] == "Killed by SIGKILL (sent by someone or something else)"
    assert "OOM" not in doc["headline"] and [a["key"] for a in doc["advice"]] == ["who_killed"]
    status = RunStore().resolve(run_id).status
    if status.get("oom_kill"):  # where the memory cgroup is readable, the supervisor counted no OOM kill
        assert status["oom_kill"]["start"] is not None
        assert status["oom_kill"]["end"] == status["oom_kill"]["start"]


def test_the_oom_killer_is_named_from_the_kernel_log_the_cgroup_or_memory(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"  # /dev/kmsg's record format
    kmsg.write_text(
        "6,1,10,-;eth0: link up\n"
        "3,2,20,-;Out of memory: Killed process 4242 (python) total-vm:8388608kB, anon-rss:7340032kB\n"
        "3,3,30,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python,pid=5151,uid=1000\n"
    )
    assert kernel_oom_lines({4242}, str(kmsg)) == ("Out of memory: Killed process 4242 (python) "
                                                   "total-vm:8388608kB, anon-rss:7340032kB",)  # fmt: skip
    assert kernel_oom_lines({5151, 7}, str(kmsg))[0].startswith("oom-kill:")
    assert kernel_oom_lines({99}, str(kmsg)) == () and kernel_oom_lines({99}, str(tmp_path / "none")) == ()
    assert oom_evidence({"oom_kill": {"start": 0, "end": 0}}, (), None) == ()
    assert oom_evidence({"oom_kill": {"start": 2, "end": 3}}, (), None) == (
        "the cgroup's memory.events oom_kill rose from 2 to 3",
    )
    limit = memory_limit()
    assert limit
    assert "GiB limit" in oom_evidence({}, (), int(limit * NEAR_LIMIT) + 1)[0]
    assert oom_evidence({}, (), limit // 4) == ()


def memory_cgroup(tmp_path: Path) -> Path:
    """A child of this process's memory cgroup capped at 200 MiB (v1 or v2); skips where it cannot be made."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    v1 = next((line.split(":", 2)[2] for line in lines if "memory" in line.split(":")[1].split(",")), None)
    base = Path("/sys/fs/cgroup/memory" + v1) if v1 is not None else Path("/sys/fs/cgroup" + lines[-1].split(":", 2)[2])
    group = base / f"gpumon-test-{tmp_path.name}"
    try:
        group.mkdir()
        (group / ("memory.limit_in_bytes" if v1 is not None else "memory.max")).write_text(str(200 * 2**20))
    except OSError as err:
        group.rmdir() if group.exists() else None
        pytest.skip(f"cannot make a memory cgroup here: {err}")
    return group


def test_a_rank_killed_by_a_cgroup_limit_is_the_oom_killers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError as err:
        pytest.skip(f"the kernel log is not readable here, the evidence this test needs: {err}")
    group = memory_cgroup(tmp_path)
    try:
        hog = f"import os\nopen({str(group / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\nx = []\n"
        run_id = launch(tmp_path, monkeypatch, hog + "while True:\n    x.append(bytearray(16 * 2**20))\n")
        doc = ended(run_id)
    finally:
        wait_until(lambda: not (group / "cgroup.procs").read_text().strip(), timeout=30)
        group.rmdir()
    assert doc["failure"]["kind"] == "host_oom" and doc["failure"]["signal"] == "SIGKILL"
    assert doc["headline"] == "Killed by the kernel's OOM killer (host memory)"
    assert any("Killed process" in line or "oom-kill" in line for line in doc["failure"]["evidence"])
