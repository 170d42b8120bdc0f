"""``gpumon signal PID SIGNAL [--create-time T]``: one checked signal, for scripts and for a Fleet on another host.

The Fleet view runs it on a remote host through ssh (core/fleet/remote.py); ``--create-time`` is the
process's start time as that host's snapshot read it, so a PID reused since is refused, not signalled.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpumon.cli.common import fail, whole


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "signal",
        parents=[parent],
        help="send a signal to a process, refusing a PID reused since --create-time",
        epilog="example: gpumon signal 4242 SIGTERM --create-time 1764950000.12 (exit 1: not signalled, and why)",
    )
    cmd.add_argument("pid", type=whole(1), help="the process id")
    cmd.add_argument("signal", help="SIGTERM, SIGKILL, SIGINT (or TERM, KILL, INT, or a number)")
    cmd.add_argument(
        "--create-time", type=float, metavar="T", help="the process's start time (seconds since the epoch, as psutil)"
    )


def cmd_signal(args: argparse.Namespace) -> int:
    from gpumon.core.signals import parse_signal, signal_pid

    try:
        sig = parse_signal(args.signal)
    except ValueError as err:
        return fail(str(err))
    outcome = signal_pid(args.pid, sig, args.create_time)
    if not outcome.ok:
        print(f"gpumon: {outcome.message}", file=sys.stderr)
        return 1
    print(outcome.message)
    return 0
