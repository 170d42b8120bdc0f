"""Acting on another host through the user's ssh: ``ask`` runs a gpumon command there (the fleet's signals,
stops and logs, a multi-node run's nodes), and ``gpumon signal`` run there signals its processes.

The remote gpumon does the checking (simulated, PID reuse through the start time its own
snapshot read, permissions), so a signal from the Fleet is as safe as one on the machine
itself. Every failure comes back as one line in words, never an exception.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from gpumon.core.fleet.hosts import Host, ssh_argv
from gpumon.core.fleet.reasons import NEVER_RAN, OLD_REMOTE, classify
from gpumon.core.model import GpuProcess
from gpumon.core.signals import SignalOutcome, send_signal

#: Seconds to wait for ssh and the remote gpumon (ssh's own ConnectTimeout is 10).
TIMEOUT_S = 20.0


def remote_command(gpumon: str | Sequence[str]) -> list[str]:
    """The remote gpumon as words: ``[fleet] gpumon = "~/venv/bin/gpumon"`` is split as a shell would."""
    return shlex.split(gpumon) if isinstance(gpumon, str) else list(gpumon)


def gpumon_argv(ssh: Sequence[str], host: Host, gpumon: str | Sequence[str], words: list[str]) -> list[str]:
    """The argv that runs ``gpumon WORDS`` on ``host``: through ssh, or for ``local`` the gpumon running now."""
    if host.local:
        return [sys.executable, "-m", "gpumon", *words]
    return ssh_argv(list(ssh), host, [*remote_command(gpumon), *words])


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def ssh_failure(returncode: int | None, stderr: Sequence[str]) -> tuple[str, str | None] | None:
    """(reason, detail) when ssh or the host failed (ssh's own 255, no gpumon there, an older gpumon), else
    None: the host's gpumon ran, and its own exit status and words stand."""
    reason, detail = classify(returncode, stderr)
    if returncode in NEVER_RAN or reason == OLD_REMOTE:
        return reason, detail
    return None


@dataclass(frozen=True)
class Answer:
    """What the host's gpumon answered, or why it could not be asked (``reason``, in words)."""

    code: int | None
    out: str = ""
    said: str = ""  # the last line the remote gpumon wrote on stderr, without "gpumon: error: "
    reason: str | None = None  # ssh's or the host's failure: the remote gpumon never answered
    detail: str | None = None  # the ssh or shell line the reason came from
    host: str | None = None  # the host the reason is about (None: a failure here, e.g. no ssh program)
    timed_out: bool = False

    @property
    def failure(self) -> str | None:
        """The reason as one line of a message, the host's name first."""
        if self.reason is None:
            return None
        return f"{self.host}: {self.reason}" if self.host else self.reason


def ask(
    ssh: Sequence[str], host: Host, gpumon: str | Sequence[str], words: list[str], timeout: float = TIMEOUT_S
) -> Answer:
    """Run ``gpumon WORDS`` on ``host`` through ssh and wait at most ``timeout`` seconds for it."""
    argv = gpumon_argv(ssh, host, gpumon, words)
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return Answer(None, reason=f"ssh program {argv[0]!r} not found: install OpenSSH or set --ssh / GPUMON_SSH")
    except subprocess.TimeoutExpired:
        return Answer(None, reason=f"no answer in {timeout:g} s", host=host.name, timed_out=True)
    except OSError as err:
        return Answer(None, reason=f"cannot start {argv[0]} ({err})", host=host.name)
    said = last_line(done.stderr).removeprefix("gpumon: ").removeprefix("error: ")
    if done.returncode in NEVER_RAN:
        reason, detail = classify(done.returncode, done.stderr.splitlines())  # the same words as the host's link
        return Answer(done.returncode, done.stdout, said, reason, detail, host.name)
    return Answer(done.returncode, done.stdout, said)


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
    words = ["signal", str(pid), name]
    if create_time is not None:
        words += ["--create-time", repr(float(create_time))]  # repr: the exact float the snapshot read
    answer = ask(ssh, host, gpumon, words, timeout)
    if answer.failure is not None:
        after = f"{name} to PID {pid} may not have gone" if answer.timed_out else f"{name} not sent"
        return SignalOutcome(False, f"{answer.failure}; {after}")
    if answer.code == 0:
        return SignalOutcome(True, f"{last_line(answer.out) or f'Sent {name} to PID {pid}'} on {host.name}")
    if "invalid choice: 'signal'" in answer.said:
        return SignalOutcome(False, f"{host.name}: its gpumon is too old to send signals; upgrade it there")
    return SignalOutcome(False, f"{host.name}: {answer.said or f'exit code {answer.code}'}")


def signal_process(ssh: list[str], host: Host, gpumon: str | list[str], proc: GpuProcess, sig: int) -> SignalOutcome:
    """A process of a fleet host's snapshot: simulated ones refused, the local machine's signalled here."""
    if proc.simulated or host.local:
        return send_signal(proc, sig)
    if host.name.startswith("ray:"):  # reached through Ray, not ssh: its name is no ssh target
        return SignalOutcome(False, f"{host.name} is a Ray node: signal it with `ssh {host.address} gpumon signal "
                             f"{proc.pid} {signal.Signals(sig).name}`, or list it in --hosts")  # fmt: skip
    return signal_remote(ssh, host, gpumon, proc.pid, sig, proc.create_time)
