"""``gpumon --ray ADDRESS``: every node of a running Ray cluster as a fleet host.

``RayFleet`` starts the Ray driver (``ray_driver``, a child process: a Ray driver whose cluster goes
away ends its own process, which gpumon must not) and reads its JSON Lines on a thread of its own.
This module never imports Ray. ``state()`` is one ``HostState`` per Ray node (``ray:HOSTNAME``,
address the node's IP), or, before any node is known, one for the cluster's address with the reason
in words. The driver is started again with a backoff when it ends (the cluster may come back).
"""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from gpumon.core.fleet.hosts import Host
from gpumon.core.fleet.model import HostState

BACKOFF_MAX_S = 30.0
#: A driver that lost its cluster's head gives up after this long (Ray's default is 60 s).
GCS_TIMEOUT_S = "15"


def settled(states: tuple[HostState, ...]) -> bool:
    """Every host has answered: live or stale with a snapshot, or down with its reason."""
    return bool(states) and all(s.link == "down" or (s.link in ("live", "stale") and s.snapshot) for s in states)


def driver_argv(address: str, interval: float, simulate: int, seed: int) -> list[str]:
    return [
        *(sys.executable, "-m", "gpumon.core.fleet.ray_driver", address),
        *("--interval", str(interval), "--simulate", str(simulate or 0), "--seed", str(seed)),
    ]


class RayFleet:
    def __init__(
        self,
        address: str,
        interval: float,
        simulate: int = 0,
        seed: int = 0,
        on_change: Callable[[tuple[HostState, ...]], None] | None = None,
    ) -> None:
        self.address, self.interval, self.simulate, self.seed = address, interval, simulate or 0, seed
        self.on_change = on_change
        self.cluster = Host(f"ray:{address}", address)  # what the state shows until nodes are known
        self._changed = threading.Condition()
        self._states: tuple[HostState, ...] = (
            HostState(self.cluster, "connecting", f"joining the Ray cluster at {address}", since=time.time()),
        )
        self._nodes: dict[str, HostState] = {}  # node id -> its latest state
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._errors: collections.deque[str] = collections.deque(maxlen=20)  # the driver's stderr tail

    # -- the public face -------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpumon-ray", daemon=True)
            self._thread.start()

    def stop(self, grace: float = 5.0) -> None:
        """End the driver (it kills its actors; Ray also ends them with their owner) and the reader."""
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join(grace)

    def state(self) -> tuple[HostState, ...]:
        """One state per Ray node (or the cluster's, before any is known): a reference copy, cheap."""
        return self._states

    def wait(self, predicate: Callable[[tuple[HostState, ...]], bool], timeout: float) -> tuple[HostState, ...]:
        """The state once ``predicate`` holds for it, or when ``timeout`` seconds have passed."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(states := self._states) and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(min(left, 0.5))
        return states

    # -- the driver ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._drive()
        except Exception as err:  # noqa: BLE001 - a bug here must show as a reason, never end gpumon
            self._lost(f"gpumon's Ray reader failed: {err!r}")
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()

    def _drive(self) -> None:
        failures = 0
        while not self._stop.is_set():
            env = dict(os.environ)
            env.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", GCS_TIMEOUT_S)
            try:
                proc = subprocess.Popen(
                    driver_argv(self.address, self.interval, self.simulate, self.seed),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    start_new_session=True,  # the terminal's Ctrl-C is gpumon's to handle, not the driver's
                )
            except OSError as err:
                self._lost(f"cannot start the Ray driver: {err}")
                return
            self._proc = proc
            threading.Thread(target=self._drain, args=(proc,), daemon=True).start()
            fatal, had_nodes = self._read(proc)
            code = proc.wait()
            if self._stop.is_set():
                return
            failures = 0 if had_nodes else failures + 1
            self._lost(fatal or self._exit_reason(code))
            self._stop.wait(min(BACKOFF_MAX_S, 2.0 ** max(0, failures - 1)))

    def _read(self, proc: subprocess.Popen[bytes]) -> tuple[str | None, bool]:
        """Lines until the driver ends: (its fatal reason, whether it reported nodes)."""
        assert proc.stdout is not None
        fd, buffer, fatal, had_nodes = proc.stdout.fileno(), b"", None, False
        heard = time.monotonic()
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], self.interval)
            if not ready:
                silent = time.monotonic() - heard
                if silent >= 2 * self.interval and self._nodes:
                    self._silent(silent)
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            heard = time.monotonic()
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if isinstance(doc, dict) and isinstance(doc.get("fatal"), str):
                    fatal = doc["fatal"]
                elif isinstance(doc, dict) and isinstance(doc.get("nodes"), list):
                    self._apply(doc["nodes"], fresh=not had_nodes)
                    had_nodes = True
        return fatal, had_nodes

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").strip()
            if line:
                self._errors.append(line)

    def _exit_reason(self, code: int) -> str:
        for line in reversed(self._errors):
            if "GCS" in line:
                return "its head stopped answering (Ray: failed to connect to GCS)"
        last = self._errors[-1] if self._errors else ""
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"the Ray driver ended ({how})" + (f": {last[-200:]}" if last else "")

    # -- states ---------------------------------------------------------------------------
    def _apply(self, nodes: list[Any], fresh: bool = False) -> None:
        if fresh:  # a new driver: a cluster that came back has new node ids, the old ones are history
            reported = {item.get("id") for item in nodes if isinstance(item, dict)}
            self._nodes = {key: state for key, state in self._nodes.items() if key in reported}
        for item in nodes:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                continue
            host = Host(str(item.get("name")), str(item.get("address")))
            snapshot = item.get("snapshot") if isinstance(item.get("snapshot"), dict) else None
            previous = self._nodes.get(item["id"])
            if snapshot is None and previous is not None:
                snapshot = previous.snapshot
            self._nodes[item["id"]] = HostState(
                host,
                str(item.get("link", "connecting")),
                item.get("reason"),
                item.get("since"),
                item.get("latency_ms"),
                snapshot,
            )
        self._publish()

    def _silent(self, silent: float) -> None:
        """The driver itself has said nothing for 2 intervals: every live node is stale."""
        reason = f"the Ray driver has not reported for {silent:.0f} s"
        for key, old in self._nodes.items():
            if old.link == "live":
                self._nodes[key] = HostState(old.host, "stale", reason, time.time() - silent, None, old.snapshot)
        self._publish()

    def _lost(self, reason: str) -> None:
        """The driver ended: every known node is down with the reason (the cluster's host if none is known)."""
        if not self._nodes:
            self._states = (HostState(self.cluster, "down", reason, since=time.time()),)
            self._notify()
            return
        for key, old in self._nodes.items():
            why = old.reason if old.link == "down" else f"lost the Ray cluster at {self.address}: {reason}"
            since = old.since if old.link == "down" else time.time()
            self._nodes[key] = HostState(old.host, "down", why, since, None, old.snapshot)
        self._publish()

    def _publish(self) -> None:
        self._states = tuple(self._nodes.values())
        self._notify()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
        if self.on_change is not None:
            self.on_change(self._states)
