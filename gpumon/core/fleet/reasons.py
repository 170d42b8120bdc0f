"""Why ssh or the gpumon behind it failed, in words, from ssh's exit status and the last lines it wrote on stderr.

OpenSSH exits 255 for its own failures (authentication, host key, name resolution, connection) and with
the remote command's status otherwise; a remote shell exits 127 for a command it cannot find and 126
for one it cannot run. Every way of reaching a host (the fleet's links, its signals and stops, the
nodes of a multi-node run, ``--host`` pass-through) reads its failures here, so each says the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpumon import __version__

AUTH = "authentication refused"
UNREACHABLE = "host unreachable"
#: The start of the reason when ssh cannot resolve the name (a typo, a host missing from ~/.ssh/config or DNS):
#: ssh's own line follows, so it reads as ssh said it, not as a network failure.
UNKNOWN_NAME = "host name not resolved"
HOST_KEY = "host key not trusted: ssh to it once yourself to check and accept the key"  # BatchMode never asks
NOT_INSTALLED = "gpumon is not installed there: pip install gpumon (or set [fleet] gpumon = PATH)"
OLD_REMOTE = (
    f"version mismatch: remote gpumon is older than {__version__} (it lacks this option): pip install -U gpumon"
)
SSH_FAILED = 255  # ssh's own exit status: it could not reach, trust or log in to the host
#: Exit statuses that mean the remote gpumon never ran: ssh failed, or the shell there could not run it.
NEVER_RAN = (126, 127, SSH_FAILED)

_RESOLVE_TEXTS = (
    "could not resolve hostname",  # OpenSSH: "ssh: Could not resolve hostname X: Name or service not known"
    "name or service not known",
    "nodename nor servname provided",  # macOS
    "temporary failure in name resolution",
)
_UNREACHABLE_TEXTS = (
    "connection refused",
    "no route to host",
    "timed out",
    "network is unreachable",
    "connection reset",
    "connection closed by",
    "broken pipe",
)


def classify(returncode: int | None, stderr: Sequence[str]) -> tuple[str, str | None]:
    """(reason, detail): the reason in words, and the ssh/remote line it came from (None if none)."""
    lines = [line.strip() for line in stderr if line.strip()]
    last = lines[-1] if lines else None
    text = "\n".join(lines).lower()
    if "permission denied" in text and ("publickey" in text or "password" in text or returncode == SSH_FAILED):
        return AUTH, _line_with(lines, "permission denied")
    if returncode in (126, 127) or "command not found" in text or ("gpumon" in text and ": not found" in text):
        return NOT_INSTALLED, last
    if returncode == SSH_FAILED:
        if "host key verification failed" in text:
            return HOST_KEY, _line_with(lines, "host key verification failed")
        for needle in _RESOLVE_TEXTS:
            if needle in text:
                said = _line_with(lines, needle)
                return f"{UNKNOWN_NAME} ({said})", said
        for needle in _UNREACHABLE_TEXTS:
            if needle in text:
                return UNREACHABLE, _line_with(lines, needle)
    if returncode == 2 and ("invalid choice" in text or "unrecognized arguments" in text):
        return OLD_REMOTE, last
    if last:  # ssh's own words, or the remote gpumon's
        return (f"ssh failed: {last}" if returncode == SSH_FAILED else last), None
    if returncode is not None and returncode < 0:
        return f"ssh ended by signal {-returncode}", None
    return f"ssh exited with status {returncode}", None


def describe(reason: str, detail: str | None) -> str:
    """The reason and, where there is one, the line it came from: one line for a message."""
    return f"{reason} ({detail})" if detail and detail not in reason else reason


def _line_with(lines: list[str], needle: str) -> str | None:
    for line in reversed(lines):
        if needle in line.lower():
            return line
    return lines[-1] if lines else None
