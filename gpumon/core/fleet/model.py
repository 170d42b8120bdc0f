"""What the fleet knows about each host: its link's state and its newest snapshot, as plain values for any view."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumon.core.fleet.hosts import Host

#: A host's link: "connecting", "live", "stale" (no snapshot for 2 intervals) or "down" (``reason`` says why).
LINK_STATES = ("connecting", "live", "stale", "down")


@dataclass(frozen=True, slots=True)
class HostState:
    host: Host
    link: str = "connecting"
    reason: str | None = None  # in words: "authentication refused", "gpumon is not installed there: pip install gpumon"
    since: float | None = None  # when the link entered this state (time.time())
    latency_ms: float | None = None  # ssh round trip, where measured
    snapshot: dict[str, Any] | None = None  # the newest ``gpumon snapshot --json`` document, kept when stale
    runs: tuple[dict[str, Any], ...] = field(default=())  # ``gpumon runs --json`` rows, where read
    detail: str | None = None  # the ssh or remote line the reason came from ("ssh: connect to host ...")
    version: str | None = None  # the host's gpumon version, from its stream
    retry_at: float | None = None  # down: when the next try starts (time.time()); None while one is under way
    runs_reason: str | None = None  # why ``runs`` could not be read lately (None: read fine, or not yet)
    runs_at: float | None = None  # when ``runs`` was last read (None: not yet)

    @property
    def gpus(self) -> list[dict[str, Any]]:
        return list(self.snapshot.get("devices", [])) if self.snapshot else []


@dataclass(frozen=True, slots=True)
class FleetState:
    hosts: tuple[HostState, ...]
    time: float

    def totals(self) -> tuple[int, int]:
        """(idle GPUs, all GPUs) over live and stale hosts: a GPU is idle with util < 5% and no process."""
        idle = total = 0
        for state in self.hosts:
            if state.link not in ("live", "stale"):  # a down host's last snapshot is history, not capacity
                continue
            busy = {p.get("gpu_index") for p in (state.snapshot or {}).get("processes", [])}
            for dev in state.gpus:
                total += 1
                idle += gpu_idle(dev, dev.get("index") in busy)
        return idle, total


def gpu_idle(device: dict[str, Any], has_process: bool) -> bool:
    """A GPU of a snapshot document is idle: answering, util < 5% and no process on it."""
    ok = device.get("state", "ok") == "ok"  # a lost GPU is not free to use
    return ok and (device.get("gpu_util") or 0) < 5 and not has_process
