"""Every file gpumon writes in its state dir is 0600, every folder 0700; stop waits for a run's last process."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpumon.core.runs.record.store import RunStore
from tests.conftest import wait_ended, wait_until

TRAIN = """
import os, time
import torch
from gpumon import telemetry
for step in range(1, 41):
    telemetry.log(step=step, loss=1.0 / step)
    print(f"rank {os.environ.get('RANK')} step {step}", flush=True)
    time.sleep(0.02)
"""

STUBBORN = """
import os, signal, sys, time
child = os.fork()
if child == 0:  # a helper that ignores SIGTERM: the supervisor's sweep must SIGKILL it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(sys.argv[1], "w").write(str(os.getpid()))
    while True:
        time.sleep(0.1)
while True:
    time.sleep(0.1)
"""


def run_gpumon(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": "", "GPUMON_STEP_RATE": "0"}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_a_real_runs_files_are_0600_and_folders_0700(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    home = tmp_path / "home"
    (tmp_path / "train.py").write_text(TRAIN)
    before = os.umask(0o022)  # the usual umask: gpumon's modes must not depend on it
    try:
        done = run_gpumon(home, "launch", "script", "train.py", "--nproc", "2", cwd=tmp_path)
    finally:
        os.umask(before)
    assert done.returncode == 0, done.stderr
    wait_ended(home, done.stdout.split()[-1], timeout=120)
    listed = run_gpumon(home, "runs", cwd=tmp_path)
    assert "finished" in listed.stdout, listed.stdout
    run_gpumon(home, "doctor", cwd=tmp_path)
    run_gpumon(home, "logs", "last", "--rank", "1", cwd=tmp_path)
    seen, wrong = 0, []
    for path in [home, *home.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        want = 0o700 if path.is_dir() else 0o600
        seen += 1
        if mode != want:
            wrong.append(f"{path.relative_to(home)} {oct(mode)}")
    names = {p.name for p in home.rglob("*")}
    assert {"index.sqlite3", "supervisor.log", "rank0.log", "rank1.log", "launcher.log", "status.json"} <= names
    assert not wrong, wrong
    assert seen > 15


def test_stop_says_stopped_only_once_the_last_process_is_gone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    pid_file = tmp_path / "helper.pid"
    done = run_gpumon(home, "launch", "script", "stubborn.py", "--", str(pid_file), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the helper never started"
        time.sleep(0.1)
    helper = int(pid_file.read_text())
    run_dir = home / "runs" / done.stdout.split()[-1]  # the supervisor's scan has made the helper one of the run's
    assert wait_until(lambda: (r := RunStore(home).load(run_dir)) and helper in [p for p, _ in r.processes()], 60)
    stopped = run_gpumon(home, "stop", "last", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert "still" not in stopped.stderr and stopped.stdout.strip().splitlines()[-1].startswith("stopped ")
    assert not psutil.pid_exists(helper) or psutil.Process(helper).status() == psutil.STATUS_ZOMBIE
