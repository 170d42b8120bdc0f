"""Command line: ``gpumon`` opens the TUI; subcommands print for scripts and plain ssh.

One module per command group (``monitor``, ``launch``, ``runs``, ``tune``, ``doctor``, ``fleet``), the parser in
``parser`` and what they share in ``common``. Heavy imports stay inside the commands so ``gpumon snapshot``
never pays for Textual and nothing here pulls in torch or ray.
"""

from __future__ import annotations

import signal
import sys
import threading


def _quiet_exit(signum: int, frame: object) -> None:
    """Ctrl-C while gpumon starts (its imports, the parser) or ends: exit 130 with no traceback."""
    raise SystemExit(130)


def _quiet_interrupts() -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) in (
        signal.default_int_handler,
        _quiet_exit,
    ):
        signal.signal(signal.SIGINT, _quiet_exit)


_quiet_interrupts()  # before the imports below: a Ctrl-C 0.1 s after start printed an import's traceback

import argparse  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402

from gpumon.cli import alerts, doctor, fleet, launch, monitor, queue, runs, serve, signals, stop, tune  # noqa: E402
from gpumon.cli.parser import build_parser  # noqa: E402

__all__ = ["build_parser", "main"]


# The commands that read config.toml (None: the monitor); the others never do, and work whatever it holds.
CONFIG_COMMANDS = frozenset({None, "launch", "tune", "queue", "serve", "alerts", "fleet"})


def _command(args: argparse.Namespace, rest: list[str]) -> Callable[[], int]:
    commands: dict[str | None, Callable[[], int]] = {
        "snapshot": lambda: monitor.cmd_snapshot(args),
        "launch": lambda: launch.cmd_launch(args, rest),
        "runs": lambda: runs.cmd_runs(args),
        "logs": lambda: runs.cmd_logs(args),
        "stop": lambda: stop.cmd_stop(args),
        "prune": lambda: runs.cmd_prune(args),
        "doctor": lambda: doctor.cmd_doctor(args),
        "tune": lambda: tune.cmd_tune(args),
        "trials": lambda: tune.cmd_trials(args),
        "fleet": lambda: fleet.cmd_fleet(args),
        "signal": lambda: signals.cmd_signal(args),
        "alerts": lambda: alerts.cmd_alerts(args),
        "queue": lambda: queue.cmd_queue(args),
        "serve": lambda: serve.cmd_serve(args),
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
    from gpumon.core.runs.record.store import StateDirError, state_dir

    try:
        state_dir()  # an unusable GPUMON_HOME: one line on every command, before anything starts
        if signal.getsignal(signal.SIGINT) is _quiet_exit:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # the commands catch KeyboardInterrupt
        if args.command in CONFIG_COMMANDS:  # a mistake in config.toml: one line before anything is made
            from gpumon.cli.config_check import config_problem

            problem = config_problem()
            if problem:
                print(f"gpumon: error: {problem}", file=sys.stderr)
                return 2
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
    finally:
        _quiet_interrupts()  # the interpreter's own shutdown (threads joined) must not print one either
