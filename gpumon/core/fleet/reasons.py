"""Why a host's ssh link ended, in words, from ssh's exit status and the last lines it wrote on stderr.

OpenSSH exits 255 for its own failures (authentication, name resolution, connection) and with the
remote command's status otherwise; a remote shell exits 127 for a command it cannot find.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpumon import __version__

AUTH = "authentication refused"
UNREACHABLE = "host unreachable"
NOT_INSTALLED = "gpumon is not installed there: pip install gpumon (or set [fleet] gpumon = PATH)"
OLD_REMOTE = (
    f"version mismatch: remote gpumon is older than {__version__} (it lacks this option): pip install -U gpumon"
)

_UNREACHABLE_TEXTS = (
    "could not resolve hostname",
    "connection refused",
    "no route to host",
    "timed out",
    "network is unreachable",
    "name or service not known",
    "connection reset",
    "connection closed by",
    "broken pipe",
)


def classify(returncode: int | None, stderr: Sequence[str]) -> tuple[str, str | None]:
    """(reason, detail): the reason in words, and the ssh/remote line it came from (None if none)."""
    lines = [line.strip() for line in stderr if line.strip()]
    last = lines[-1] if lines else None
    text = "\n".join(lines).lower()
    if "permission denied" in text and ("publickey" in text or "password" in text or returncode == 255):
        return AUTH, _line_with(lines, "permission denied")
    if returncode == 127 or "command not found" in text or ("gpumon" in text and ": not found" in text):
        return NOT_INSTALLED, last
    if returncode == 255:
        for needle in _UNREACHABLE_TEXTS:
            if needle in text:
                return UNREACHABLE, _line_with(lines, needle)
    if returncode == 2 and ("invalid choice" in text or "unrecognized arguments" in text):
        return OLD_REMOTE, last
    if last:
        return last, None
    if returncode is not None and returncode < 0:
        return f"ssh ended by signal {-returncode}", None
    return f"ssh exited with status {returncode}", None


def _line_with(lines: list[str], needle: str) -> str | None:
    for line in reversed(lines):
        if needle in line.lower():
            return line
    return lines[-1] if lines else None
