"""A trial's GPU memory on whichever node it runs: its worker's pid matched against that node's processes.

Tune's results name the worker (``pid``) and its node (``hostname``, ``node_ip``; the callback records
them as ``trial_pid``, ``trial_hostname``, ``trial_node_ip``). A trial on this machine is matched
against the local GPU sample, one on another node against that node's fleet snapshot (``gpumon --ray``
or ``--hosts``): a pid means nothing on another machine.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from gpumon.core.fleet.model import HostState


class TrialPlace(Protocol):
    """What a trial says of where it runs (``TrialRow`` has these)."""

    @property
    def id(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def hostname(self) -> str | None: ...
    @property
    def node_ip(self) -> str | None: ...


def pid_memory(processes: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    """PID -> GPU memory in bytes, summed over the GPUs a process uses (a snapshot document's processes)."""
    out: dict[int, int] = {}
    for proc in processes:
        pid, used = proc.get("pid"), proc.get("used_memory")
        if isinstance(pid, int) and isinstance(used, int):
            out[pid] = out.get(pid, 0) + used
    return out


def trial_gpu_memory(
    trials: Iterable[TrialPlace],
    local: Mapping[int, int],
    hosts: Iterable[HostState] = (),
    here: str | None = None,
) -> dict[str, int]:
    """Trial id -> GPU memory of its process, for the trials whose process is found on its node.

    ``local``: this machine's PID -> memory; ``hosts``: the fleet's states (a down host's snapshot is
    history and is not used); ``here``: this machine's host name (default: ``socket.gethostname()``)."""
    here = here if here is not None else socket.gethostname()
    by_ip: dict[str, list[dict[int, int]]] = {}
    by_name: dict[str, list[dict[int, int]]] = {}
    for state in hosts:
        if state.link == "down" or not state.snapshot:
            continue
        memory = pid_memory(state.snapshot.get("processes") or ())
        by_ip.setdefault(state.host.address, []).append(memory)
        name = (state.snapshot.get("host") or {}).get("hostname")
        if isinstance(name, str):
            by_name.setdefault(name, []).append(memory)
    out: dict[str, int] = {}
    for trial in trials:
        if trial.pid is None:
            continue
        nodes = by_ip.get(trial.node_ip or "") or by_name.get(trial.hostname or "") or []
        found = next((memory[trial.pid] for memory in nodes if trial.pid in memory), None)
        if found is None and trial.hostname in (None, here):  # this machine's trial (or one that says not where)
            found = local.get(trial.pid)
        if found is not None:
            out[trial.id] = found
    return out
