"""The Ray side of ``gpumon --ray``: a child process that joins a running cluster, pins one ``NodeAgent``
to every node and prints every node's state once per interval as JSON Lines.

``python -m gpumon.core.fleet.ray_driver ADDRESS --interval S [--simulate N --seed K]``

It is a process of its own, not a thread of the monitor, because a Ray driver whose cluster head goes
away ends its own process (Ray 2.60, measured: "Failed to connect to GCS within 60 seconds ... The
program will terminate", exit 1) and because ``ray.init`` to a port with no cluster waits for minutes.
gpumon must outlive both. Each line is ``{"t", "address", "nodes": [...]}``; when there is no cluster
to join, one line ``{"fatal": reason}`` and exit 2. It never starts a cluster.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpumon.core.fleet.ray_nodes import Poller

NO_CLUSTER = "no Ray cluster at {address}: start one with `ray start --head`"
PROBE_S = 3.0  # a GCS that does not accept a connection in 3 s is not there


def emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def resolve(ray: Any, address: str) -> str:
    """``auto`` (and ``$RAY_ADDRESS``) as Ray resolves it, to host:port. Raises ConnectionError in words."""
    if address.startswith("ray://"):
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die
    except ImportError:  # a future Ray without it: ray.init resolves it
        return address
    try:
        return str(canonicalize_bootstrap_address_or_die(address))
    except (ConnectionError, ValueError):
        raise ConnectionError(NO_CLUSTER.format(address=address)) from None


def probe(address: str, shown: str) -> None:
    """Connect to the cluster's port once (a client socket, closed at once): ray.init would wait minutes."""
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not port.isdigit():
        raise ConnectionError(f"Ray address {address!r}: write it as host:port (e.g. 10.0.0.1:6379) or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S).close()
    except OSError as err:
        why = err.strerror or type(err).__name__
        raise ConnectionError(f"{NO_CLUSTER.format(address=shown)} ({why.lower()})") from None


def join(address: str, ship: Path | None = None) -> Any:
    """``ray`` joined to the cluster at ``address``. Raises ConnectionError with the reason in words.

    ``ship``: a gpumon package folder sent to the nodes with the job (``py_modules``), so the actors run
    this gpumon's code and nothing of gpumon needs installing there."""
    try:
        import ray
    except ImportError:
        raise ConnectionError("Ray is not installed in this Python: pip install 'ray>=2.40'") from None
    logging.getLogger("ray").setLevel(logging.ERROR)  # its INFO/WARNING lines are not ours to show
    resolved = resolve(ray, address)
    probe(resolved, address)
    env = {"py_modules": [str(ship)], "excludes": ["__pycache__", "tui/", "*.tcss"]} if ship else None
    try:
        ray.init(
            address=resolved, logging_level=logging.ERROR, log_to_driver=False, namespace="gpumon", runtime_env=env
        )
    except Exception as err:  # noqa: BLE001 - version mismatch, auth, anything: said in one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConnectionError(f"cannot join the Ray cluster at {address}: {first}") from None
    return ray


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpumon-ray-driver", allow_abbrev=False)
    parser.add_argument("address")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--simulate", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ship = Path(__file__).resolve().parents[2]  # this gpumon package
    try:
        ray = join(args.address, ship)
    except ConnectionError as err:
        emit({"fatal": str(err)})
        return 2
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # ray.init set its own (sys.exit): ours ends cleanly
    parent = os.getppid()
    poller = Poller(ray, args.interval, args.simulate, args.seed)
    try:
        while not stop.is_set() and os.getppid() == parent:  # an orphan would keep its actors forever
            started = time.monotonic()
            poller.tick(started + args.interval)
            emit({"t": time.time(), "address": args.address, "nodes": poller.doc()})
            stop.wait(max(0.0, started + args.interval - time.monotonic()))
    except BrokenPipeError:
        pass  # gpumon went away
    finally:
        poller.close()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
