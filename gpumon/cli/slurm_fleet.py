"""``--slurm``: the nodes of your running Slurm jobs as fleet hosts (each through ``srun --overlap``) and the
cluster's partitions as a summary line, for the monitor and ``gpumon fleet``.

Without Slurm's commands on PATH, ``--slurm`` is one line saying which is missing, and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import asdict
from typing import Any

from gpumon.cli.common import fail
from gpumon.cli.watching import print_until_stopped

SETTLE_S = 30.0  # squeue, sinfo, then an srun step per node and its python's start


def add_slurm_option(parser: argparse.ArgumentParser, in_command: bool) -> None:
    parser.add_argument(
        "--slurm",
        action="store_true",
        default=argparse.SUPPRESS if in_command else False,
        help="add the nodes of your running Slurm jobs (through srun --overlap) and the partitions' summary",
    )


def slurm_problem() -> str | None:
    """Why ``--slurm`` cannot be used here, in one line; None when it can."""
    from gpumon.core.slurm.cluster import COMMANDS, missing_command

    missing = missing_command()
    if missing is not None:
        return (
            f"{missing} not found: --slurm needs Slurm's commands ({', '.join(COMMANDS)}) on PATH; "
            "run gpumon on the cluster's login node"
        )
    try:
        node_gpumon()
    except ValueError as err:
        return str(err)
    return None


def node_gpumon() -> list[str] | None:
    """``[slurm] gpumon`` of config.toml (a list of words, or one string split as a shell would), None when
    unset. Raises ValueError with what to write."""
    from gpumon.core.config import ConfigError, config_path, config_section

    try:
        value = config_section("slurm").get("gpumon")
    except ConfigError as err:
        raise ValueError(str(err)) from None
    example = f'{config_path()}: [slurm] gpumon must be the command on the nodes, e.g. gpumon = ["~/venv/bin/gpumon"]'
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError:
            raise ValueError(example) from None
    if not isinstance(value, list) or not value or not all(isinstance(w, str) and w for w in value):
        raise ValueError(example)
    return [os.path.expanduser(value[0]), *value[1:]]


def build_slurm_fleet(args: argparse.Namespace, runs_every: float = 5.0) -> Any:
    """The SlurmFleet for ``--slurm`` (None without it); the caller checked ``slurm_problem`` first."""
    if not getattr(args, "slurm", False):
        return None
    from gpumon.core.fleet.slurm_source import SlurmFleet

    return SlurmFleet(args.interval, node_gpumon(), runs_every=runs_every)


def cmd_fleet_slurm(args: argparse.Namespace) -> int:
    """``gpumon fleet --slurm [--json] [--watch]``: your jobs' nodes once every one has answered, and the summary."""
    from gpumon.core.fleet.slurm_source import settled

    problem = slurm_problem()
    if problem:
        return fail(problem)
    fleet = build_slurm_fleet(args, runs_every=5.0 if args.json else 0.0)  # the table shows no runs
    fleet.start()
    try:
        fleet.wait(lambda f: settled(f, runs=args.json), SETTLE_S)
        print_until_stopped(lambda _first: _print(fleet, args.json, args.watch), args.watch, args.interval)
        if args.watch:  # ended by the user or the reader
            return 0
    except KeyboardInterrupt:  # while the jobs settle
        return 0
    finally:
        fleet.stop()
    status = fleet.status
    if status.read_at is None or status.jobs_failed:  # the cluster's trouble, not a mistake of the user's: 1
        print(f"gpumon: {status.reason or f'squeue did not answer in {SETTLE_S:.0f} s'}", file=sys.stderr)
        return 1
    return 0


def slurm_doc(fleet: Any) -> dict[str, Any]:
    """``gpumon fleet --json``'s document for the jobs' nodes, with ``slurm``: the jobs, partitions and line."""
    from gpumon.cli.fleet_table import fleet_doc
    from gpumon.core.fleet.model import FleetState

    doc = fleet_doc(FleetState(fleet.state(), time.time()))
    status = fleet.status
    doc["slurm"] = {
        "line": status.line(),
        "read_at": status.read_at,
        "reason": status.reason,
        "left_out": status.left_out,
        "jobs": [{**asdict(job), "nodes": list(job.nodes)} for job in status.jobs],
        "partitions": [asdict(p) for p in status.summary.partitions] if status.summary else [],
    }
    return doc


def _print(fleet: Any, as_json: bool, watch: bool) -> None:
    if as_json:
        doc = slurm_doc(fleet)
        print(json.dumps(doc, separators=(",", ":")) if watch else json.dumps(doc, indent=1), flush=True)
        return
    from gpumon.cli.fleet_table import print_fleet
    from gpumon.core.fleet.model import FleetState

    print(fleet.summary())
    if fleet.state():
        print()
        print_fleet(FleetState(fleet.state(), time.time()), False, watch)
    elif watch:
        print(flush=True)
