"""Fleets for tests, benches and the tmux test: HostStates from real simulated snapshots, and a stand-in monitor.

Every snapshot is a real ``Snapshot.to_dict()`` document of the simulated GPU source (a seed per host, so
their GPUs differ) with a frozen host reading; the stand-in has the FleetMonitor's ``state()``.
``python -m tests.fleet_data [--hosts N] [--gpus G]`` opens gpumon on such a fleet (the tmux test, the bench).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from gpumon.core.fleet.hosts import Host, parse_host
from gpumon.core.fleet.model import FleetState, HostState
from gpumon.core.gpu import open_gpu_source
from gpumon.core.model import Snapshot
from gpumon.core.sampler import Sampler
from gpumon.tui.app import GpumonApp
from tests.conftest import FrozenHost, heard

#: 2026-11-22 14:02:11 UTC: "stale since" reads the same everywhere with TZ=UTC.
STALE_SINCE = 1795356131.0


def snapshots(gpus: int, seed: int, ticks: int, hostname: str) -> list[dict[str, Any]]:
    """``ticks`` successive snapshot documents of ``gpus`` simulated GPUs."""
    source = open_gpu_source(gpus, seed)
    host = dataclasses.replace(FrozenHost().sample(), hostname=hostname)
    return [Snapshot(gpu=source.sample(), host=host).to_dict() for _ in range(ticks)]


def mixed_fleet(ticks: int = 5) -> FleetState:
    """Five hosts in every state: two live, one stale, one refusing auth, one connecting."""

    def docs(name: str, gpus: int, seed: int) -> dict[str, Any]:
        return snapshots(gpus, seed, ticks, name)[-1]

    runs = ({"id": "ddp-1122-140211-c132", "status": "running", "pids": [5_000_000, 5_000010]},)
    return FleetState(
        (
            HostState(parse_host("gpu1"), "live", since=STALE_SINCE, latency_ms=23.4, snapshot=docs("gpu1", 4, 1),
                      runs=runs),
            HostState(parse_host("alice@gpu2:2222"), "live", latency_ms=41.0, snapshot=docs("gpu2", 2, 2)),
            HostState(parse_host("gpu3"), "stale", since=STALE_SINCE, snapshot=docs("gpu3", 2, 3)),
            HostState(parse_host("gpu4"), "down", reason="authentication refused", since=STALE_SINCE),
            HostState(parse_host("gpu5"), "connecting"),
        ),
        STALE_SINCE,
    )  # fmt: skip


class StandInFleet:
    """What the app needs of a FleetMonitor: ``state()`` (never blocks), ``ssh`` and ``gpumon``.

    ``states`` are handed out in turn, one per ``interval`` seconds (precomputed: the app's cost is measured,
    not the simulation's).
    """

    def __init__(self, states: Sequence[FleetState], interval: float = 1.0, ssh: list[str] | None = None,
                 gpumon: str = "gpumon") -> None:  # fmt: skip
        self.states = list(states)
        self.interval = interval
        self.started = time.monotonic()
        self.ssh = ssh or ["ssh"]
        self.gpumon = gpumon

    def refresh_runs(self, name: str | None = None) -> None:
        """The monitor reads a host's runs again; these states are fixed."""

    def state(self) -> FleetState:
        if self.interval <= 0:
            return self.states[0]
        tick = int((time.monotonic() - self.started) / self.interval)
        return self.states[tick % len(self.states)]


def live_fleet(hosts: int, gpus: int, ticks: int = 30) -> list[FleetState]:
    """``ticks`` states of ``hosts`` live hosts (gpu01, gpu02, …) with ``gpus`` simulated GPUs each."""
    names = [f"gpu{i + 1:02d}" for i in range(hosts)]
    docs = {name: snapshots(gpus, seed, ticks, name) for seed, name in enumerate(names)}
    return [
        FleetState(
            tuple(
                HostState(Host(n, n), "live", latency_ms=20.0 + i % 7, snapshot=docs[n][t]) for i, n in enumerate(names)
            ),
            float(t),
        )
        for t in range(ticks)
    ]


def fleet_app(fleet: Any, readonly: bool = False) -> GpumonApp:
    sampler = Sampler(open_gpu_source(1, 0), FrozenHost(), interval=1.0)
    sampler.sample_once()
    return heard(GpumonApp(sampler, readonly=readonly, fleet=fleet))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gpumon on a stand-in fleet of simulated hosts")
    parser.add_argument("--hosts", type=int, default=0, help="live hosts (0: the five mixed ones)")
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args(argv)
    states = live_fleet(args.hosts, args.gpus) if args.hosts else [mixed_fleet()]
    fleet_app(StandInFleet(states)).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
