"""``gpumon fleet``: every fleet host's state, printed once. Here the nodes of a Ray cluster (``--ray``)."""

from __future__ import annotations

import argparse
from typing import Any

from gpumon.cli.common import fail
from gpumon.cli.ray_fleet import add_ray_option, cmd_fleet_ray


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    fleet = sub.add_parser(
        "fleet",
        parents=[parent],
        help="every fleet host's link and GPUs, printed once",
        description="A Ray cluster's nodes are sampled by one small gpumon actor per node: Ray is the transport.",
        epilog="example: gpumon fleet --ray auto --json",
    )
    add_ray_option(fleet, in_command=True)
    fleet.add_argument("--json", action="store_true", help="print a JSON document")


def cmd_fleet(args: argparse.Namespace) -> int:
    if getattr(args, "ray", None):
        return cmd_fleet_ray(args)
    return fail("gpumon fleet needs hosts: give --ray ADDRESS (auto, or the head's host:6379)")
