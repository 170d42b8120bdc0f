"""The ``gpumon`` parser: the monitor's own options and ``snapshot``; each command module adds its commands."""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
from typing import Any, NoReturn

from gpumon import __version__
from gpumon.cli import alerts, doctor, fleet, launch, queue, runs, serve, signals, tune
from gpumon.cli.common import whole
from gpumon.cli.ray_fleet import add_ray_option
from gpumon.cli.slurm_fleet import add_slurm_option
from gpumon.core.fleet.stream import FIELDS
from gpumon.core.sampler import MIN_INTERVAL


class _Parser(argparse.ArgumentParser):
    """argparse that reports a user's mistake in one line and exits 2, and takes options only as spelled
    (no abbreviations: ``--simulat 4`` is a mistake, not ``--simulate``). Subparsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._words: list[str] = []
        self.intermixed = False  # options may come between positionals (`launch script --env A=B x.py`)
        self._mixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._words = list(args or [])
        if self.intermixed and not self._mixing:  # it calls back here for each of its two passes
            self._mixing = True
            try:
                return super().parse_known_intermixed_args(args, namespace)
            finally:
                self._mixing = False
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        prog = self.prog
        unknown = self._unknown_option() if "invalid choice" in message else None
        command = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
        if unknown is not None:  # `gpumon --simulat 4`: argparse would blame '4', taken for the command
            message = f"unknown option {unknown}" + _did_you_mean(unknown.split("=")[0], self._option_string_actions)
        elif command is not None:  # `gpumon lanch ddp`
            message = f"unknown command {command.group(1)!r}" + _did_you_mean(command.group(1), self._commands())
        elif message.startswith("unrecognized arguments: "):  # `gpumon runs --jsn`: said by the top parser
            sub = next((self._commands()[w] for w in self._words if w in self._commands()), None)
            if sub is not None:
                prog = sub.prog
                word = message.split(": ", 1)[1].split()[0]
                message = f"unknown option {word}" if word.startswith("-") else f"unexpected argument {word!r}"
                hint = _after_dashes(self._words, word) if sub.prog.endswith(" launch") else None
                if hint is not None:  # `gpumon launch script train.py --steps 10`: the script's, not ours
                    message += f": a program's own arguments go after '--': {hint}"
                    self.exit(2, f"{prog}: error: {message}\n")
                if word.startswith("--"):
                    message += _did_you_mean(word.split("=")[0], sub._option_string_actions)
        self.exit(2, f"{prog}: error: {message} (see '{prog} --help')\n")

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    def _unknown_option(self) -> str | None:
        for word in self._words:
            if word.startswith("--") and len(word) > 2 and word.split("=")[0] not in self._option_string_actions:
                return word
        return None


def _after_dashes(words: list[str], unknown: str) -> str | None:
    """The launch line with '--' before ``unknown`` when a program (a .py file, a path, or --module's name)
    comes before it; None when none does (then it is gpumon's own option, mistyped)."""
    at = words.index(unknown) if unknown in words else -1
    before = words[words.index("launch") + 1 : at] if "launch" in words and at > 0 else []
    module = [before[n + 1] for n, w in enumerate(before[:-1]) if w == "--module"]
    program = module or [w for w in before[1:] if not w.startswith("-") and (w.endswith(".py") or "/" in w)]
    return "gpumon " + shlex.join([*words[:at], "--", *words[at:]]) if program else None


def _did_you_mean(word: str, known: Any) -> str:
    close = difflib.get_close_matches(word, [k for k in known if not k.startswith("-") or word.startswith("-")], n=1)
    return f": did you mean {close[0]}?" if close else ""


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
    fleet.add_fleet_options(parser, in_command=False)
    add_ray_option(parser, in_command=False)
    add_slurm_option(parser, in_command=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    snap = sub.add_parser(
        "snapshot", parents=[_source_options(in_command=True)], help="print GPUs, processes and host once, then exit"
    )
    snap.add_argument("--json", action="store_true", help="print a stable JSON document instead of a table")
    snap.add_argument("--watch", action="store_true", help="with --json: one document per line every interval")
    snap.add_argument(
        "--interval", dest="watch_interval", type=_interval, metavar="S", help="with --watch: seconds between lines"
    )
    snap.add_argument(
        "--fields", choices=FIELDS, help="with --json: 'full' (default) or 'fleet', the compact form a fleet reads"
    )
    snap.add_argument(
        "--runs",
        type=whole(0),
        metavar="N",
        help="with --watch: also the runs (live ones and the newest N ended), sent when they change",
    )
    snap.add_argument(
        "--record",
        metavar="DIR",
        help="also copy the /sys and /proc files the AMD and Intel readers used into DIR (GPUMON_SYS_ROOT=DIR replays)",
    )
    for module in (launch, runs, queue, tune, doctor, signals, alerts):  # the order of `gpumon --help`
        module.add_commands(sub, _Parser(add_help=False))
    fleet.add_commands(sub, _source_options(in_command=True))  # --simulate/--seed: `local`'s or Ray nodes' GPUs
    serve.add_commands(sub, _source_options(in_command=True))  # --simulate/--seed: serve's GPUs
    return parser
