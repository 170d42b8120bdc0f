"""Running gpumon's own commands on the hosts of a multi-node group: over the user's ssh, or here for ``local``.

Every call has a time limit and turns every way of failing (ssh cannot connect or
authenticate, gpumon missing there, a remote error, no answer) into a reason in
words; nothing here raises to its caller but ``NodeError``. The call itself is the fleet's (core/fleet/remote.py
``ask``) and so are the reasons (core/fleet/reasons.py): a host fails with the same words everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpumon.core.fleet.hosts import Host
from gpumon.core.fleet.reasons import OLD_REMOTE, classify, describe
from gpumon.core.fleet.remote import ask, gpumon_argv

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
        return gpumon_argv(self.ssh, host, self.gpumon, words)

    def call(self, host: Host, words: list[str], timeout: float = 60.0) -> str:
        """Run ``gpumon WORDS`` on ``host``; its stdout, or NodeError with the reason (and ssh's line)."""
        answer = ask(self.ssh, host, self.gpumon, words, timeout)
        if answer.reason is not None:
            raise NodeError(host.name, describe(answer.reason, answer.detail))
        if answer.code != 0:
            reason, detail = classify(answer.code, [answer.said])  # an older gpumon there: the fleet's words
            said = describe(reason, detail) if reason == OLD_REMOTE else answer.said
            raise NodeError(host.name, said or f"gpumon there exited with code {answer.code}")
        return answer.out

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


def each(items: Iterable[T], work: Callable[[T], R]) -> list[R | NodeError]:
    """``work`` on every item at once (one slow host never delays the others); results in order."""
    from concurrent.futures import ThreadPoolExecutor  # with logging, ~10 ms every `gpumon runs` paid for nothing

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
