"""Command line: ``gpumon`` opens the TUI; subcommands print for scripts and plain ssh.

One module per command group (``monitor``, ``launch``, ``runs``, ``tune``, ``doctor``, ``fleet``), the parser in
``parser`` and what they share in ``common``. Heavy imports stay inside the commands so ``gpumon snapshot``
never pays for Textual and nothing here pulls in torch or ray.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from gpumon.cli import alerts, doctor, fleet, launch, monitor, queue, runs, signals, tune
from gpumon.cli.parser import build_parser

__all__ = ["build_parser", "main"]


def _command(args: argparse.Namespace, rest: list[str]) -> Callable[[], int]:
    commands: dict[str | None, Callable[[], int]] = {
        "snapshot": lambda: monitor.cmd_snapshot(args),
        "launch": lambda: launch.cmd_launch(args, rest),
        "runs": lambda: runs.cmd_runs(args),
        "logs": lambda: runs.cmd_logs(args),
        "stop": lambda: runs.cmd_stop(args),
        "prune": lambda: runs.cmd_prune(args),
        "doctor": lambda: doctor.cmd_doctor(args),
        "tune": lambda: tune.cmd_tune(args),
        "trials": lambda: tune.cmd_trials(args),
        "fleet": lambda: fleet.cmd_fleet(args),
        "signal": lambda: signals.cmd_signal(args),
        "alerts": lambda: alerts.cmd_alerts(args),
        "queue": lambda: queue.cmd_queue(args),
    }
    return commands.get(args.command, lambda: monitor.cmd_monitor(args))


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
    from gpumon.core.runs.store import StateDirError, state_dir

    try:
        state_dir()  # an unusable GPUMON_HOME: one line on every command, before anything starts
        return _command(args, rest)()
    except StateDirError as err:
        print(f"gpumon: {err}", file=sys.stderr)
        return 2
    except PermissionError as err:  # a file of another user's run (sudo gpumon launch ...): one line, no traceback
        where = f" on {err.filename}" if err.filename else ""
        print(f"gpumon: error: permission denied{where}: run gpumon as the user who owns it", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpumon snapshot | head`
        sys.stderr.close()
        return 0
