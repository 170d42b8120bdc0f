"""Command line: ``gpumon`` opens the TUI; subcommands print for scripts and plain ssh.

Imports stay inside the commands so ``gpumon snapshot`` never pays for Textual
and nothing here pulls in torch or ray.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from gpumon import __version__
from gpumon.core.sampler import MIN_INTERVAL


class _Parser(argparse.ArgumentParser):
    """argparse that reports a user's mistake in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes seconds, e.g. 1 or 0.5, not {text!r}") from None
    if not value >= MIN_INTERVAL:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL} s, got {text}")
    return value


def _gpu_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a number of GPUs, e.g. 2, not {text!r}") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"takes 1 to 64 GPUs, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None


def _source_options(in_command: bool = False) -> _Parser:
    """--simulate/--seed, accepted before or after a command. After one, they
    default to SUPPRESS so they never overwrite what was given before it."""
    common = _Parser(add_help=False)
    unset = argparse.SUPPRESS if in_command else None
    common.add_argument("--simulate", type=_gpu_count, metavar="N", default=unset, help="show N simulated GPUs")
    common.add_argument(
        "--seed", type=_int, default=unset if in_command else 0, help="seed of the simulated GPUs (default 0)"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpumon",
        description="Terminal cockpit for PyTorch training servers. With no command, opens the live monitor.",
        parents=[_source_options()],
    )
    parser.add_argument("--version", action="version", version=f"gpumon {__version__}")
    parser.add_argument(
        "--interval",
        type=_interval,
        default=1.0,
        metavar="S",
        help=f"sampling interval in seconds (default 1, min {MIN_INTERVAL})",
    )
    parser.add_argument("--readonly", action="store_true", help="look only: never send signals, launch or stop runs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    snap = sub.add_parser(
        "snapshot", parents=[_source_options(in_command=True)], help="print GPUs, processes and host once, then exit"
    )
    snap.add_argument("--json", action="store_true", help="print a stable JSON document instead of a table")
    from gpumon import cli_runs

    cli_runs.add_commands(sub, _Parser(add_help=False))
    from gpumon import cli_doctor, cli_tune

    cli_tune.add_commands(sub, _Parser(add_help=False))
    cli_doctor.add_commands(sub, _Parser(add_help=False))
    return parser


def cmd_snapshot(args: argparse.Namespace) -> int:
    import json
    import time

    from gpumon.core.gpu import open_gpu_source
    from gpumon.core.host import HostSource
    from gpumon.core.model import Snapshot
    from gpumon.core.report import snapshot_text

    started = time.monotonic()
    host = HostSource()
    source = open_gpu_source(args.simulate, args.seed)
    try:
        gpu = source.sample()
    finally:
        source.close()
    # CPU percent is a rate: it needs a short window since the priming call.
    time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
    snap = Snapshot(gpu=gpu, host=host.sample())
    if args.json:
        print(json.dumps(snap.to_dict(), indent=2))
    else:
        import shutil

        print(snapshot_text(snap, width=shutil.get_terminal_size((100, 24)).columns))
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    from gpumon.core.config import ConfigError, load_keymap
    from gpumon.core.gpu import open_gpu_source
    from gpumon.core.host import HostSource
    from gpumon.core.sampler import Sampler

    try:
        keymap = load_keymap()
    except ConfigError as err:
        print(f"gpumon: error: {err}", file=sys.stderr)
        return 2
    # NVML starts and the first sample is taken while Textual imports.
    sampler = Sampler(open_gpu_source(args.simulate, args.seed), HostSource(), interval=args.interval)
    sampler.start()
    try:
        from gpumon.tui.app import GpumonApp

        GpumonApp(sampler, readonly=args.readonly, keymap=keymap).run()
    finally:
        sampler.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    dashes = "--" in argv
    if dashes:  # what follows -- goes to the launched program untouched
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    args = parser.parse_args(argv)
    if dashes and args.command != "launch":
        parser.error("'--' only goes with launch, before the program's own arguments")
    try:
        from gpumon import cli_runs

        if args.command == "snapshot":
            return cmd_snapshot(args)
        if args.command == "launch":
            return cli_runs.cmd_launch(args, rest)
        if args.command == "runs":
            return cli_runs.cmd_runs(args)
        if args.command == "logs":
            return cli_runs.cmd_logs(args)
        if args.command == "stop":
            return cli_runs.cmd_stop(args)
        if args.command == "doctor":
            from gpumon import cli_doctor

            return cli_doctor.cmd_doctor(args)
        if args.command in ("tune", "trials"):
            from gpumon import cli_tune

            return cli_tune.cmd_tune(args) if args.command == "tune" else cli_tune.cmd_trials(args)
        return cmd_monitor(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpumon snapshot | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
