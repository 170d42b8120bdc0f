"""``--ray ADDRESS``: the nodes of a running Ray cluster as fleet hosts, for the monitor and ``gpumon fleet``.

Nothing here imports Ray: ``RayFleet`` runs Ray's driver in a child process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import time
from typing import Any

from gpumon import __version__
from gpumon.cli.common import fail, print_table

# Joining, then one actor per node: a worker's start is seconds, on a busy node over a minute (STARTING_S)
SETTLE_S = 150.0
_ADDRESS = re.compile(r"^(ray://)?([A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})$")


def add_ray_option(parser: argparse.ArgumentParser, in_command: bool) -> None:
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=argparse.SUPPRESS if in_command else None,
        help="add every node of a running Ray cluster: auto, or the head's host:6379",
    )


def ray_problem(address: str) -> str | None:
    """Why ``--ray ADDRESS`` cannot be used, in one line; None when it can."""
    if importlib.util.find_spec("ray") is None:
        return "--ray needs Ray in this Python: pip install 'ray>=2.40'"
    if address == "auto":
        return None
    found = _ADDRESS.match(address)
    if found is None or not 0 < int(found.group(3)) < 65536:
        return f"--ray {address!r}: give auto or the head's host:port, e.g. --ray 10.0.0.1:6379"
    return None


def build_ray_fleet(args: argparse.Namespace) -> Any:
    """The RayFleet for ``--ray`` (None without it); the caller checked ``ray_problem`` first."""
    address = getattr(args, "ray", None)
    if not address:
        return None
    from gpumon.core.fleet.ray_source import RayFleet

    return RayFleet(address, args.interval, getattr(args, "simulate", None) or 0, getattr(args, "seed", None) or 0)


def cmd_fleet_ray(args: argparse.Namespace) -> int:
    """``gpumon fleet --ray ADDRESS [--json]``: every node's state once, when each has answered."""
    from gpumon.core.fleet.ray_source import settled

    problem = ray_problem(args.ray)
    if problem:
        return fail(problem)
    fleet = build_ray_fleet(args)
    fleet.start()
    try:
        states = fleet.wait(settled, SETTLE_S)
    finally:
        fleet.stop()
    if len(states) == 1 and states[0].host == fleet.cluster:  # no node known: the cluster's own reason
        return fail(states[0].reason or f"the Ray cluster at {args.ray} did not answer in {SETTLE_S:.0f} s")
    if args.json:
        print(json.dumps(ray_doc(states), indent=1))
    else:
        _table(states)
    return 0


def ray_doc(states: tuple[Any, ...]) -> dict[str, Any]:
    """The fleet document (as ``gpumon fleet --json`` prints for ssh hosts) of a Ray cluster's nodes."""
    from gpumon.core.fleet.model import FleetState

    fleet = FleetState(tuple(states), time.time())
    idle, total = fleet.totals()
    hosts = [
        {
            **{"name": s.host.name, "address": s.host.address, "user": s.host.user, "port": s.host.port},
            **{"link": s.link, "reason": s.reason, "since": s.since, "latency_ms": s.latency_ms},
            **{"snapshot": s.snapshot, "runs": list(s.runs)},
        }
        for s in fleet.hosts
    ]
    return {"schema": 1, "version": __version__, "time": fleet.time, "idle_gpus": idle, "gpus": total, "hosts": hosts}


def _table(states: tuple[Any, ...]) -> None:
    rows = [("HOST", "ADDRESS", "LINK", "LATENCY", "GPUS", "NOTE")]
    for s in states:
        latency = "" if s.latency_ms is None else f"{s.latency_ms:.0f} ms"
        note = s.reason or ((s.snapshot or {}).get("reason") or "")
        rows.append((s.host.name, s.host.address, s.link, latency, str(len(s.gpus)) if s.snapshot else "", note))
    print_table(rows)
