"""A fleet host's runs through the user's ssh: their doctor, and stopping them (their log: log_follow.py).

Each is the host's own gpumon (``gpumon doctor|stop RUN``) run through ssh, so what it reads and
does is the host's; a failure of ssh or of the host comes back as one line in words, never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpumon.core.fleet.hosts import Host
from gpumon.core.fleet.remote import ask, last_line
from gpumon.core.signals import SignalOutcome

#: ``gpumon stop`` waits for the run to end: SIGTERM, SIGKILL after 10 s, then up to 10 s more; ssh on top.
STOP_TIMEOUT_S = 45.0
DOCTOR_TIMEOUT_S = 30.0


def stop_remote(
    ssh: Sequence[str], host: Host, gpumon: str | Sequence[str], run_id: str, kill: bool = False,
    timeout: float = STOP_TIMEOUT_S,
) -> SignalOutcome:  # fmt: skip
    """``gpumon stop RUN [--kill]`` on ``host``; the outcome says what its gpumon said, or why it could not ask."""
    answer = ask(ssh, host, gpumon, ["stop", run_id, *(["--kill"] if kill else [])], timeout)
    if answer.failure is not None:
        after = f"{run_id} may still run" if answer.timed_out else f"{run_id} not stopped"
        return SignalOutcome(False, f"{answer.failure}; {after}")
    if answer.code == 0:
        return SignalOutcome(True, f"{last_line(answer.out) or f'stopped {run_id}'} on {host.name}")
    said = answer.said or last_line(answer.out) or f"exit code {answer.code}"
    return SignalOutcome(False, f"{host.name}: {said}")


def remote_doctor(
    ssh: Sequence[str], host: Host, gpumon: str | Sequence[str], run_id: str, timeout: float = DOCTOR_TIMEOUT_S
) -> tuple[str, str | None]:
    """(``gpumon doctor RUN``'s text on ``host``, None), or ("", why not)."""
    answer = ask(ssh, host, gpumon, ["doctor", run_id], timeout)
    if answer.failure is not None:
        return "", answer.failure
    if answer.code != 0:
        return "", answer.said or f"gpumon doctor exited with {answer.code}"
    return answer.out.rstrip("\n"), None
