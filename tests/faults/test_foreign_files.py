"""A run dir gpumon cannot read (another user's) or a rank log replaced by a FIFO: `gpumon logs` says so in
one line and exits 2, within a bound; never a traceback, never a hang. Real runs, real CLI processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_ended

BOUND_S = 20.0  # far more than a `gpumon logs` takes; a FIFO opened for reading would wait forever


def run_gpumon(tmp_path: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "gpumon", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND_S * 3,
        cwd=tmp_path,
    )


def finished_run(tmp_path: Path) -> tuple[str, Path]:
    (tmp_path / "hello.py").write_text("print('hello from the run')\n")
    done = run_gpumon(tmp_path, "launch", "script", "hello.py")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    wait_ended(tmp_path / "home", run_id, timeout=60)
    assert "finished" in run_gpumon(tmp_path, "runs", run_id).stdout
    return run_id, tmp_path / "home" / "runs" / run_id


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.parametrize("follow", [False, True])
def test_a_fifo_in_place_of_a_rank_log_is_one_line_and_exit_2_without_waiting(tmp_path: Path, follow: bool) -> None:
    run_id, run_dir = finished_run(tmp_path)
    log = run_dir / "logs" / "rank0.log"
    log.unlink()
    os.mkfifo(log, 0o600)
    started = time.monotonic()
    try:
        done = run_gpumon(tmp_path, "logs", run_id, *(["--follow"] if follow else []))
    except subprocess.TimeoutExpired:
        pytest.fail("gpumon logs hung on the FIFO")
    assert time.monotonic() - started < BOUND_S
    line = one_line(done)
    assert "rank0.log is a FIFO" in line, line


def can_drop_dac() -> str | None:
    """Why this test cannot run as a user without root's override of file modes, or None when it can."""
    if os.geteuid() != 0:
        return "needs root: to make a run dir of another user, then run gpumon without root's DAC override"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"setpriv cannot drop capabilities here: {probe.stderr.decode().strip()}"
    return None


# uid 0 without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: file modes hold for it as for any user, so a run dir
# owned by nobody, 0700, is another user's (nobody itself could not run this venv's python, under /root).
AS_ANOTHER = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")


@pytest.mark.parametrize("which", ["id", "last", "follow"])
def test_another_users_run_dir_is_one_line_and_exit_2(tmp_path: Path, which: str) -> None:
    why = can_drop_dac()
    if why is not None:
        pytest.skip(why)
    run_id, run_dir = finished_run(tmp_path)
    for path in (run_dir, *run_dir.rglob("*")):
        os.lchown(path, 65534, 65534)  # nobody's, 0700 and 0600 as gpumon made them
    args = {"id": (run_id,), "last": ("last",), "follow": (run_id, "--follow")}[which]
    done = run_gpumon(tmp_path, "logs", *args, prefix=AS_ANOTHER)
    line = one_line(done)
    assert "permission denied" in line and "rank0.log" in line and "nobody" in line, line
    mine = run_gpumon(tmp_path, "logs", run_id)  # with root's override, as its owner would: the log reads
    assert mine.returncode == 0 and "hello from the run" in mine.stdout, mine.stderr
