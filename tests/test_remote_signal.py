"""`gpumon signal` on real child processes, and the same through ssh (a stand-in that runs the command here)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpumon.core.fleet.hosts import parse_host
from gpumon.core.fleet.reasons import NOT_INSTALLED
from gpumon.core.fleet.remote import signal_process, signal_remote
from gpumon.core.model import GpuProcess

STANDIN = [sys.executable, str(Path(__file__).with_name("local_ssh.py"))]
GPUMON = [sys.executable, "-m", "gpumon"]
HOST = parse_host("alice@gpu7:2222")


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def gpumon_signal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUMON, "signal", *args], capture_output=True, text=True, timeout=60)


def test_gpumon_signal_sends_sigterm_to_a_real_process(child: subprocess.Popen[bytes]) -> None:
    created = psutil.Process(child.pid).create_time()
    done = gpumon_signal(str(child.pid), "SIGTERM", "--create-time", repr(created))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Sent SIGTERM to PID {child.pid}"
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_gpumon_signal_refuses_a_pid_whose_create_time_differs(child: subprocess.Popen[bytes]) -> None:
    created = psutil.Process(child.pid).create_time()
    done = gpumon_signal(str(child.pid), "KILL", "--create-time", repr(created - 5))
    assert done.returncode == 1
    assert done.stderr.strip() == f"gpumon: PID {child.pid} now belongs to another process: not signalled"
    assert child.poll() is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["1", "SIGFOO"], "unknown signal 'SIGFOO'"),
        (["x", "TERM"], "takes a whole number"),
        (["1", "TERM", "--create-time", "soon"], "invalid float value"),
    ],
)
def test_gpumon_signal_mistakes_get_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = gpumon_signal(*args)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_remote_signal_through_ssh_reaches_the_process(child: subprocess.Popen[bytes]) -> None:
    created = psutil.Process(child.pid).create_time()
    outcome = signal_remote(STANDIN, HOST, GPUMON, child.pid, signal.SIGTERM, created)
    assert outcome.ok, outcome.message
    assert outcome.message == f"Sent SIGTERM to PID {child.pid} on alice@gpu7:2222"
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_remote_signal_refuses_a_reused_pid_and_says_so(child: subprocess.Popen[bytes]) -> None:
    created = psutil.Process(child.pid).create_time()
    outcome = signal_remote(STANDIN, HOST, GPUMON, child.pid, signal.SIGKILL, created + 1)
    assert not outcome.ok
    assert outcome.message == f"alice@gpu7:2222: PID {child.pid} now belongs to another process: not signalled"
    assert child.poll() is None


def test_remote_signal_failures_are_words(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = signal_remote(STANDIN, HOST, "gpumon-is-not-here", 4242, signal.SIGTERM, None)
    assert missing.message == f"alice@gpu7:2222: {NOT_INSTALLED}; SIGTERM not sent"  # the words of its Fleet link
    no_ssh = signal_remote(["no-such-ssh-program"], HOST, GPUMON, 4242, signal.SIGTERM, None)
    assert not no_ssh.ok and no_ssh.message.startswith("ssh program 'no-such-ssh-program' not found")
    monkeypatch.setenv("FAKE_SSH_EXIT", "255")
    monkeypatch.setenv("FAKE_SSH_STDERR", "alice@gpu7: Permission denied (publickey).")
    refused = signal_remote(STANDIN, HOST, GPUMON, 4242, signal.SIGTERM, None)
    assert refused.message == "alice@gpu7:2222: authentication refused; SIGTERM not sent"


def test_a_simulated_process_is_never_sent_anywhere() -> None:
    proc = GpuProcess(0, 5_000_000, 1, 1.0, "compute", simulated=True)
    outcome = signal_process(["no-such-ssh-program"], HOST, GPUMON, proc, signal.SIGTERM)
    assert outcome.message == "PID 5000000 is simulated: nothing to send SIGTERM to"
