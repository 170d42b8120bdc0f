"""A fleet host going down, as an alert: raised by whoever watches the fleet (the app, ``gpumon fleet --watch``).

A host that was live (or stale) and whose link is now ``down`` raises one ``host_down`` alert with the reason
in words; at most one per host in the ``[alerts]`` window. Recorded in the state dir's attempts file (it is
no run's) and sent where ``on`` picks ``host_down``.
"""

from __future__ import annotations

import threading
import time

from gpumon.core.fleet.model import HostState


class HostAlerts:
    def __init__(self) -> None:
        self._up: set[str] = set()
        self._sent: dict[str, float] = {}
        self._lock = threading.Lock()  # links publish from their own threads

    def observe(self, state: HostState) -> None:
        """One host's new state; sends the alert (off this thread) when it just went down."""
        name = state.host.name
        with self._lock:
            if state.link in ("live", "stale"):
                self._up.add(name)
                return
            if state.link != "down" or name not in self._up:
                return
            self._up.discard(name)
        from gpumon.core.alerts.outbox import send_alert, settings_or_error

        settings, _ = settings_or_error()
        now = time.time()
        if now - self._sent.get(name, float("-inf")) < settings.window_s:
            return
        self._sent[name] = now
        reason = state.reason or "no answer"
        send_alert(f"host {name} went down: {reason}", "host_down", fleet_host=name, reason=reason, detail=state.detail)
