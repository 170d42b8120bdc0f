"""Several fleet sources as the one fleet the app reads: ssh hosts (``FleetMonitor``), Ray clusters
(``RayFleet``) and Slurm jobs' nodes (``SlurmFleet``), started and stopped together, their hosts in the order given."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gpumon.core.fleet.model import FleetState, HostState


def hosts_of(state: Any) -> tuple[HostState, ...]:
    """A source's hosts: a ``FleetState``'s, or the tuple a ``RayFleet`` or ``SlurmFleet`` gives."""
    return tuple(getattr(state, "hosts", state))


class CombinedFleet:
    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = tuple(parts)
        # The ssh program and remote gpumon of the ssh part, for views that reach a host through ssh.
        self.ssh = next((p.ssh for p in self.parts if getattr(p, "ssh", None)), None)
        self.gpumon = next((p.gpumon for p in self.parts if getattr(p, "gpumon", None)), None)

    def start(self) -> None:
        for part in self.parts:
            part.start()

    def stop(self) -> None:
        for part in self.parts:
            part.stop()

    def refresh_runs(self, name: str | None = None) -> None:
        for part in self.parts:
            if hasattr(part, "refresh_runs"):
                part.refresh_runs(name)

    def summary(self) -> str | None:
        """The parts' summary lines (a Slurm cluster's partitions), one per line; None when no part has one."""
        lines = [part.summary() for part in self.parts if hasattr(part, "summary")]
        return "\n".join(line for line in lines if line) or None

    def state(self) -> FleetState:
        return FleetState(tuple(h for part in self.parts for h in hosts_of(part.state())), time.time())
