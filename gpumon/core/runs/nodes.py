"""Running gpumon's own commands on the hosts of a multi-node group: over the user's ssh, or here for ``local``.

Every call has a time limit and turns every way of failing (ssh cannot connect or
authenticate, gpumon missing there, a remote error, no answer) into a reason in
words; nothing here raises to its caller but ``NodeError``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from gpumon.core.fleet.hosts import Host, ssh_argv

SSH_FAILED = 255  # ssh's own exit code: it could not reach or log in to the host
NOT_FOUND = 127  # the remote shell found no such command
T = TypeVar("T")
R = TypeVar("R")


class NodeError(RuntimeError):
    """A host could not do what was asked; ``reason`` says why in words."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"{host}: {reason}")
        self.host = host
        self.reason = reason


@dataclass(frozen=True)
class Reach:
    """How to run gpumon on a host: the user's ssh argv and the gpumon command there."""

    ssh: tuple[str, ...] = ("ssh",)
    gpumon: tuple[str, ...] = ("gpumon",)

    def argv(self, host: Host, words: list[str]) -> list[str]:
        if host.local:  # this machine: the same gpumon that is running now, no ssh
            return [sys.executable, "-m", "gpumon", *words]
        return ssh_argv(list(self.ssh), host, [*self.gpumon, *words])

    def call(self, host: Host, words: list[str], timeout: float = 60.0) -> str:
        """Run ``gpumon WORDS`` on ``host``; its stdout, or NodeError with the reason."""
        argv = self.argv(host, words)
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
            )
        except FileNotFoundError:
            raise NodeError(host.name, f"no program {argv[0]!r}: install OpenSSH or give --ssh") from None
        except subprocess.TimeoutExpired:
            raise NodeError(host.name, f"no answer in {timeout:.0f} s") from None
        except OSError as err:
            raise NodeError(host.name, f"cannot run {argv[0]}: {err}") from None
        if done.returncode != 0:
            raise NodeError(host.name, self.reason(done.returncode, done.stderr))
        return done.stdout

    def call_json(self, host: Host, words: list[str], timeout: float = 60.0) -> dict[str, Any]:
        out = self.call(host, words, timeout)
        lines = [line for line in out.splitlines() if line.strip()]
        try:  # a whole document, or one JSON line after other output
            data = json.loads(out)
        except ValueError:
            try:
                data = json.loads(lines[-1])
            except (ValueError, IndexError):
                raise NodeError(host.name, f"gpumon there answered no JSON: {(lines or [''])[-1][:200]!r}") from None
        if not isinstance(data, dict):
            raise NodeError(host.name, "gpumon there answered JSON of another shape (a different version?)")
        return data

    def reason(self, code: int, stderr: str) -> str:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        if code == NOT_FOUND or "command not found" in last or "No such file" in last:
            return f"{self.gpumon[0]} not found there: install gpumon on it, or set [fleet] gpumon to its path"
        if code == SSH_FAILED:
            return f"ssh failed: {last or 'exit code 255'}"
        if last.startswith("gpumon: error: "):
            return last[len("gpumon: error: ") :]
        return last or f"gpumon there exited with code {code}"


def each(items: Iterable[T], work: Callable[[T], R]) -> list[R | NodeError]:
    """``work`` on every item at once (one slow host never delays the others); results in order."""
    items = list(items)
    if not items:
        return []

    def guarded(item: T) -> R | NodeError:
        try:
            return work(item)
        except NodeError as err:
            return err

    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(guarded, items))
