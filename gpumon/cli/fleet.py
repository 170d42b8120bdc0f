"""``gpumon fleet``: every host's link and GPUs, printed once (or every interval); ``logs --host`` through ssh.

Hosts come from ``--hosts`` or the config's ``[fleet] hosts``; the ssh program from ``--ssh``, else
``$GPUMON_SSH``, else ``[fleet] ssh``, else ``ssh``; the command on the hosts from ``[fleet] gpumon``.
A mistake in any of them is one line and exit 2, before any ssh starts.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from gpumon.cli.common import fail
from gpumon.cli.fleet_table import print_fleet
from gpumon.cli.ray_fleet import add_ray_option
from gpumon.cli.slurm_fleet import add_slurm_option
from gpumon.cli.watching import print_until_stopped
from gpumon.core.fleet.hosts import (
    SSH_ENV,
    FleetConfig,
    Host,
    HostError,
    fleet_reach,
    load_fleet_config,
    parse_host,
    parse_hosts,
)

SETTLE_S = 15.0  # ssh's ConnectTimeout (10 s) and a remote gpumon's start


@dataclass(frozen=True)
class FleetSettings:
    hosts: tuple[Host, ...]
    ssh: list[str]
    gpumon: list[str]


def add_fleet_options(parser: argparse.ArgumentParser, in_command: bool) -> None:
    """--hosts/--ssh, before or after a command (after one they never overwrite what came before)."""
    unset = argparse.SUPPRESS if in_command else None
    parser.add_argument("--hosts", metavar="LIST", default=unset, help="hosts to watch: gpu1,alice@gpu2:2222,local")
    parser.add_argument(
        "--ssh", metavar="CMD", default=unset, help=f"the ssh program and its options (default ${SSH_ENV}, or ssh)"
    )


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    fleet = sub.add_parser(
        "fleet",
        parents=[parent],
        help="every host's link and GPUs, printed once (--watch: every interval)",
        description="Hosts are reached with your own ssh: ssh -o BatchMode=yes HOST gpumon snapshot --json --watch.",
        epilog="example: gpumon fleet --hosts local,gpu1,alice@gpu2:2222 --json",
    )
    add_fleet_options(fleet, in_command=True)
    add_ray_option(fleet, in_command=True)
    add_slurm_option(fleet, in_command=True)
    fleet.add_argument("--json", action="store_true", help="print a JSON document (JSON Lines with --watch)")
    fleet.add_argument("--watch", action="store_true", help="print again every interval until Ctrl-C")


def settings(args: argparse.Namespace) -> FleetSettings | None:
    """The fleet the user asked for; None when no host is configured. Raises HostError for a mistake."""
    config = load_fleet_config()
    given = getattr(args, "hosts", None)
    hosts = tuple(parse_hosts(given)) if given is not None else config.hosts
    if not hosts:
        return None
    ssh, gpumon = reach(args, config, need_ssh=any(not h.local for h in hosts))
    return FleetSettings(hosts, ssh, gpumon)


def reach(args: argparse.Namespace, config: FleetConfig, need_ssh: bool = True) -> tuple[list[str], list[str]]:
    """(the ssh argv, the gpumon command on the hosts), checked. Raises HostError."""
    return fleet_reach(getattr(args, "ssh", None), config, need_ssh)


def build_monitor(args: argparse.Namespace, sampler: Any = None) -> Any:
    """The FleetMonitor the app gets when hosts are configured (None otherwise). Raises HostError."""
    fleet = settings(args)
    if fleet is None:
        return None
    from gpumon.core.fleet.monitor import FleetMonitor

    return FleetMonitor(  # the app's: a host going down is an alert (the Alerts view, a toast, the channels)
        fleet.hosts, fleet.ssh, args.interval, fleet.gpumon, args.simulate, args.seed, sampler=sampler, alerts=True
    )


def cmd_fleet(args: argparse.Namespace) -> int:
    from gpumon.core.fleet.monitor import FleetMonitor, settled

    if getattr(args, "slurm", False):
        from gpumon.cli.slurm_fleet import cmd_fleet_slurm

        return cmd_fleet_slurm(args)
    if getattr(args, "ray", None):
        from gpumon.cli.ray_fleet import cmd_fleet_ray

        return cmd_fleet_ray(args)
    try:
        fleet = settings(args)
    except HostError as err:
        return fail(str(err))
    if fleet is None:
        hosts = '[fleet] hosts = ["gpu1"] in config.toml'
        return fail(f"no hosts: give --hosts gpu1,gpu2, --ray ADDRESS, --slurm, or {hosts}")
    runs_every = 0.0 if not args.json else 5.0  # the table shows no runs: read them only for JSON
    monitor = FleetMonitor(
        fleet.hosts, fleet.ssh, args.interval, fleet.gpumon, args.simulate, args.seed, runs_every=runs_every,
        alerts=args.watch,  # a host going down while watched: a host_down alert
    )  # fmt: skip
    monitor.start()
    try:
        settled_state = monitor.wait(lambda s: settled(s) and _runs_read(s, runs_every), SETTLE_S)
        print_until_stopped(
            lambda first: print_fleet(settled_state if first else monitor.state(), args.json, args.watch),
            args.watch,
            args.interval,
        )
        return 0
    except KeyboardInterrupt:  # while the hosts settle
        return 0
    finally:
        monitor.stop()


def _runs_read(state: Any, runs_every: float) -> bool:
    return not runs_every or all(h.link != "live" or h.runs_at or h.runs_reason for h in state.hosts)


def cmd_remote_logs(args: argparse.Namespace) -> int:
    """``gpumon logs RUN --host H [--follow]``: the host's own ``gpumon logs`` through ssh, its output as it comes."""
    from gpumon.core.fleet.log_follow import log_words

    return passthrough(args, log_words(args.run, args.lines, args.rank, args.launcher, args.follow))


def cmd_remote_doctor(args: argparse.Namespace) -> int:
    """``gpumon doctor RUN --host H [--json] [--census]``: the host's own ``gpumon doctor`` through ssh."""
    words = ["doctor", args.run, *(["--json"] if args.json else [])]
    if args.snapshot is not None:  # read on that host, where the run keeps it
        words += ["--snapshot", *([args.snapshot] if args.snapshot else [])]
    return passthrough(args, words + (["--census", "--gap", str(args.gap)] if args.census else []))


def passthrough(args: argparse.Namespace, words: list[str]) -> int:
    """``gpumon WORDS`` on ``args.host`` through ssh, its stdout as it comes and its own errors as they are;
    ssh's failures (and a host without gpumon) are one line with the reason and exit 2."""
    import subprocess

    from gpumon.core.fleet.link import stop_process
    from gpumon.core.fleet.reasons import describe
    from gpumon.core.fleet.remote import gpumon_argv, ssh_failure

    try:
        host = parse_host(args.host)
        ssh, gpumon = reach(args, load_fleet_config())
    except HostError as err:
        return fail(str(err))
    sys.stdout.flush()
    proc = subprocess.Popen(
        gpumon_argv(ssh, host, gpumon, words), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _, errors = proc.communicate()
    except KeyboardInterrupt:
        stop_process(proc, grace=1.0)
        return 0
    text = errors.decode(errors="replace")
    failed = ssh_failure(proc.returncode, text.splitlines())
    if failed is not None:
        return fail(f"{host.name}: {describe(*failed)}")
    sys.stderr.write(text)
    return proc.returncode
