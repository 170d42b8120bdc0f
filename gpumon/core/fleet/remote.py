"""Acting on another host's processes through the user's ssh: ``gpumon signal`` run there.

The remote gpumon does the checking (simulated, PID reuse through the start time its own
snapshot read, permissions), so a signal from the Fleet is as safe as one on the machine
itself. Every failure comes back as one line in words, never an exception.
"""

from __future__ import annotations

import shlex
import signal
import subprocess

from gpumon.core.fleet.hosts import Host, ssh_argv
from gpumon.core.fleet.reasons import classify
from gpumon.core.model import GpuProcess
from gpumon.core.signals import SignalOutcome, send_signal

#: Seconds to wait for ssh and the remote gpumon (ssh's own ConnectTimeout is 10).
TIMEOUT_S = 20.0
INSTALL = "pip install gpumon there, or set [fleet] gpumon to its path"


def remote_command(gpumon: str | list[str]) -> list[str]:
    """The remote gpumon as words: ``[fleet] gpumon = "~/venv/bin/gpumon"`` is split as a shell would."""
    return shlex.split(gpumon) if isinstance(gpumon, str) else list(gpumon)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def signal_remote(
    ssh: list[str],
    host: Host,
    gpumon: str | list[str],
    pid: int,
    sig: int,
    create_time: float | None,
    timeout: float = TIMEOUT_S,
) -> SignalOutcome:
    """Run ``gpumon signal PID SIG --create-time T`` on ``host``; the outcome's message says what happened there."""
    name = signal.Signals(sig).name
    words = [*remote_command(gpumon), "signal", str(pid), name]
    if create_time is not None:
        words += ["--create-time", repr(float(create_time))]  # repr: the exact float the snapshot read
    try:
        done = subprocess.run(
            ssh_argv(ssh, host, words), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError:
        return SignalOutcome(False, f"ssh program {ssh[0]!r} not found: install OpenSSH or set --ssh / GPUMON_SSH")
    except subprocess.TimeoutExpired:
        return SignalOutcome(False, f"{host.name}: no answer in {timeout:g} s; {name} to PID {pid} may not have gone")
    except OSError as err:
        return SignalOutcome(False, f"{host.name}: cannot start ssh ({err})")
    said = last_line(done.stderr).removeprefix("gpumon: ").removeprefix("error: ")
    if done.returncode == 0:
        return SignalOutcome(True, f"{last_line(done.stdout) or f'Sent {name} to PID {pid}'} on {host.name}")
    if done.returncode == 255:
        reason, _ = classify(255, done.stderr.splitlines())  # the same words as the host's link
        return SignalOutcome(False, f"{host.name}: {reason}; {name} not sent")
    if done.returncode in (126, 127):
        return SignalOutcome(False, f"{host.name}: gpumon is not installed there ({INSTALL}); {name} not sent")
    if "invalid choice: 'signal'" in said:
        return SignalOutcome(False, f"{host.name}: its gpumon is too old to send signals; upgrade it there")
    return SignalOutcome(False, f"{host.name}: {said or f'exit code {done.returncode}'}")


def signal_process(ssh: list[str], host: Host, gpumon: str | list[str], proc: GpuProcess, sig: int) -> SignalOutcome:
    """A process of a fleet host's snapshot: simulated ones refused, the local machine's signalled here."""
    if proc.simulated or host.local:
        return send_signal(proc, sig)
    return signal_remote(ssh, host, gpumon, proc.pid, sig, proc.create_time)
