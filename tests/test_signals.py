"""send_signal against real child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from gpumon.core import signals
from gpumon.core.model import GpuProcess
from gpumon.core.signals import send_signal

NOBODY = 65534


def _spawn_sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _reap(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.kill()
    child.wait(timeout=10)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = _spawn_sleeper()
    try:
        yield proc
    finally:
        _reap(proc)


def gpu_process(pid: int, create_time: float | None, simulated: bool = False, user: str | None = None) -> GpuProcess:
    return GpuProcess(
        gpu_index=0,
        pid=pid,
        used_memory=1024**3,
        sm_util=50.0,
        kind="compute",
        user=user,
        create_time=create_time,
        simulated=simulated,
    )


def test_sigterm_reaches_the_process(child: subprocess.Popen[bytes]) -> None:
    created = psutil.Process(child.pid).create_time()
    outcome = send_signal(gpu_process(child.pid, created), signal.SIGTERM)
    assert outcome.ok is True
    assert outcome.message == f"Sent SIGTERM to PID {child.pid}"
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_reused_pid_is_refused(child: subprocess.Popen[bytes]) -> None:
    created = psutil.Process(child.pid).create_time()
    outcome = send_signal(gpu_process(child.pid, created - 100.0), signal.SIGKILL)
    assert outcome.ok is False
    assert "another process" in outcome.message and "not signalled" in outcome.message
    assert child.poll() is None
    assert psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE


def test_exited_process_is_reported(child: subprocess.Popen[bytes]) -> None:
    created = psutil.Process(child.pid).create_time()
    child.kill()
    child.wait(timeout=10)
    outcome = send_signal(gpu_process(child.pid, created), signal.SIGTERM)
    assert outcome.ok is False
    assert "already exited" in outcome.message


def test_simulated_process_is_never_signalled(child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_lookup(*args: object, **kwargs: object) -> None:
        raise AssertionError("a simulated process must not be looked up or signalled")

    monkeypatch.setattr(signals.psutil, "Process", no_lookup)
    monkeypatch.setattr(os, "kill", no_lookup)
    # even with the PID of a live process, a simulated entry signals nothing
    outcome = send_signal(gpu_process(child.pid, None, simulated=True), signal.SIGKILL)
    monkeypatch.undo()

    assert outcome.ok is False
    assert "simulated" in outcome.message
    assert child.poll() is None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop to another user")
def test_permission_denied_names_the_owner(child: subprocess.Popen[bytes]) -> None:
    """An unprivileged user signalling root's process gets a clear refusal."""
    target = gpu_process(child.pid, psutil.Process(child.pid).create_time(), user="root")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, try, report through the pipe, and never return to pytest
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            outcome = send_signal(target, signal.SIGTERM)
            os.write(write_end, json.dumps({"ok": outcome.ok, "message": outcome.message}).encode())
            code = 0
        except BaseException as err:  # noqa: BLE001 - report anything to the parent
            os.write(write_end, json.dumps({"error": repr(err)}).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    result = json.loads(b"".join(chunks) or b"{}")
    assert "error" not in result, result["error"]
    assert os.waitstatus_to_exitcode(status) == 0
    assert result["ok"] is False
    assert result["message"].startswith("Permission denied")
    assert f"PID {child.pid}" in result["message"] and "root" in result["message"]
    assert child.poll() is None  # root's process lives on
