"""Every host's link, started and stopped together; ``state()`` is the whole fleet at this moment.

Each link runs on threads of its own and publishes an immutable ``HostState`` on every change, so
``state()`` only copies references under a lock: cheap enough for a view to call on every frame.
``on_change`` (optional) is called from the links' threads after each change; a UI hands it on to
its own thread (Textual: ``post_message``) and never blocks in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpumon.core.fleet.host_alerts import HostAlerts
from gpumon.core.fleet.hosts import Host, ssh_program
from gpumon.core.fleet.link import RUNS_EVERY_S, RUNS_RECENT, BaseLink, HostLink
from gpumon.core.fleet.local import LocalLink
from gpumon.core.fleet.model import FleetState, HostState


class FleetMonitor:
    def __init__(
        self,
        hosts: Sequence[Host],
        ssh: Sequence[str] | None = None,
        interval: float = 1.0,
        gpumon: Sequence[str] = ("gpumon",),
        simulate: int | None = None,
        seed: int = 0,
        on_change: Callable[[FleetState], None] | None = None,
        sampler: Any = None,
        fields: str = "fleet",
        runs_every: float = RUNS_EVERY_S,
        recent: int = RUNS_RECENT,
        alerts: bool = False,
    ) -> None:
        """``ssh``: the user's ssh argv (default: ``ssh_program()``); ``gpumon``: the command on the hosts;
        ``simulate``/``seed``/``sampler`` apply to ``local`` only; ``runs_every`` 0 reads no runs; ``alerts``: a
        host going down raises a ``host_down`` alert (host_alerts.py)."""
        self.hosts = tuple(hosts)
        self.ssh = list(ssh) if ssh is not None else ssh_program()
        self.interval = interval
        self.gpumon = list(gpumon)
        self.on_change = on_change
        self.host_alerts = HostAlerts() if alerts else None
        self._lock = threading.Lock()
        self._states: dict[str, HostState] = {h.name: HostState(h, since=time.time()) for h in self.hosts}
        self.links: dict[str, BaseLink] = {}
        for host in self.hosts:
            if host.local:
                self.links[host.name] = LocalLink(
                    host, interval, self._publish, simulate, seed, sampler, fields, runs_every, recent
                )
            else:
                self.links[host.name] = HostLink(
                    host, self.ssh, self.gpumon, interval, self._publish, fields, runs_every, recent
                )
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            for link in self.links.values():
                link.start()

    def stop(self) -> None:
        """End every link; no ssh process of ours is left when this returns."""
        links = list(self.links.values())
        stoppers = [threading.Thread(target=link.stop, daemon=True) for link in links]  # in parallel: 16 x 2 s
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        self._started = False

    def refresh_runs(self, name: str | None = None) -> None:
        """Read the runs of host ``name`` (every host with None) now, not at the next poll."""
        for link_name, link in self.links.items():
            if name in (None, link_name):
                link.refresh_runs()

    def state(self) -> FleetState:
        with self._lock:
            hosts = tuple(self._states[h.name] for h in self.hosts)
        return FleetState(hosts, time.time())

    def wait(self, predicate: Callable[[FleetState], bool], timeout: float) -> FleetState:
        """The fleet's state once ``predicate`` holds for it, or when ``timeout`` seconds have passed."""
        changed = threading.Condition()
        previous = self.on_change

        def notify(state: FleetState) -> None:
            with changed:
                changed.notify_all()
            if previous is not None:
                previous(state)

        self.on_change = notify
        try:
            deadline = time.monotonic() + timeout
            with changed:
                while not predicate(state := self.state()) and time.monotonic() < deadline:
                    changed.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            return state
        finally:
            self.on_change = previous

    def _publish(self, state: HostState) -> None:
        with self._lock:
            self._states[state.host.name] = state
        if self.host_alerts is not None:
            self.host_alerts.observe(state)
        callback = self.on_change
        if callback is not None:
            callback(self.state())


def settled(state: FleetState) -> bool:
    """Every host has answered: live (with a snapshot) or down with its reason."""
    return all(h.link == "down" or (h.link in ("live", "stale") and h.snapshot is not None) for h in state.hosts)
