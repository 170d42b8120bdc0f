"""``gpumon launch | runs | logs | stop``: runs from the command line.

Kept apart from cli.py so the monitor's parser stays small; nothing here
imports torch (the run's own processes do).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any

from gpumon.core import format as fmt
from gpumon.core.runs.spec import KINDS


def _whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes a whole number, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


_positive = _whole(1)
_count = _whole(0)


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    launch = sub.add_parser(
        "launch",
        parents=[parent],
        help="start a training run in the background (prints its id last)",
        description="Start a run detached from this terminal. With no program the kind's own trainer runs on the "
        "digits set. Arguments after -- go to the program.",
        epilog="examples: gpumon launch ddp --nproc 2 | gpumon launch script train.py -- --lr 0.1",
    )
    launch.add_argument(
        "kind", choices=[k for k in KINDS if k != "tune"], help="ddp, dp, model-parallel, pipeline or script"
    )
    launch.add_argument("program", nargs="?", help="a Python script (required for script; optional otherwise)")
    launch.add_argument("--module", "-m", metavar="NAME", help="run a Python module instead of a script")
    launch.add_argument("--nproc", type=_positive, help="processes per node (ddp: GPUs, or 2 on a CPU)")
    launch.add_argument("--gpus", metavar="IDS", help="GPU indexes for CUDA_VISIBLE_DEVICES, e.g. 0,1")
    launch.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment")
    launch.add_argument("--name", help="a label shown beside the id")
    launch.add_argument("--max-restarts", type=_count, default=0, help="torchrun restarts after a failure")
    launch.add_argument("--nnodes", type=_positive, default=1, help="nodes in a multi-node run")
    launch.add_argument("--node-rank", type=_count, default=0, help="this node's rank (multi-node)")
    launch.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous on the first node (multi-node)")
    launch.add_argument("--rdzv-id", help="rendezvous id shared by all nodes (default: this run's id)")
    launch.add_argument("--follow", "-f", action="store_true", help="then follow rank 0's log until the run ends")
    launch.add_argument(
        "--oom-retry", action="store_true", help="after an out-of-memory failure, relaunch with half the --batch-size"
    )
    launch.add_argument(
        "--keep-batch", action="store_true", help="with --oom-retry: double --accum-steps as the batch halves"
    )

    runs = sub.add_parser("runs", parents=[parent], help="list runs (id, kind, status, step, loss, memory)")
    runs.add_argument("--json", action="store_true", help="print JSON: id, kind, status, exit code, times, dir")

    logs = sub.add_parser("logs", parents=[parent], help="print a run's log (rank 0 unless --rank)")
    logs.add_argument("run", help="run id or a unique prefix; 'last' for the newest")
    logs.add_argument("--rank", type=_count, help="which rank's log (default 0)")
    logs.add_argument("--launcher", action="store_true", help="torchrun's own output instead of a rank's")
    logs.add_argument("--lines", "-n", type=_count, default=50, help="lines to print first (default 50)")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")

    stop = sub.add_parser("stop", parents=[parent], help="stop a run: SIGTERM, then SIGKILL after 10 s")
    stop.add_argument("run", help="run id or a unique prefix; 'last' for the newest")
    stop.add_argument("--kill", action="store_true", help="SIGKILL at once")
    stop.add_argument("--no-wait", action="store_true", help="return without waiting for the run to end")
    stop.add_argument("--trial", metavar="ID", help="a search (kind tune): stop only this trial")


def fail(message: str) -> int:
    """A user's mistake: one line on stderr, exit code 2."""
    print(f"gpumon: error: {message}", file=sys.stderr)
    return 2


def default_nproc(kind: str, gpus: str | None, visible: int) -> int:
    if kind == "pipeline":
        return 2
    if kind != "ddp":
        return 1
    if gpus:
        return len(gpus.split(","))
    return visible if visible else min(2, os.cpu_count() or 1)


def cmd_launch(args: argparse.Namespace, rest: list[str]) -> int:
    from gpumon.core.gpu import visible_gpu_count
    from gpumon.core.runs.launcher import build_command, launch, other_node_commands
    from gpumon.core.runs.spec import RunSpec, SpecError, parse_env, parse_gpus
    from gpumon.core.runs.store import RunStore

    if args.module and args.program:
        return fail("give a script or --module, not both")
    program = f"-m {args.module}" if args.module else args.program
    visible = visible_gpu_count()
    try:
        gpus = parse_gpus(args.gpus, visible)
        spec = RunSpec(
            kind=args.kind,
            program=program,
            args=tuple(rest),
            nproc=args.nproc or default_nproc(args.kind, gpus, visible),
            gpus=gpus,
            env=parse_env(args.env),
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            rdzv_endpoint=args.rdzv_endpoint,
            rdzv_id=args.rdzv_id,
            max_restarts=args.max_restarts,
            name=args.name,
            oom_retry=args.oom_retry,
            keep_batch=args.keep_batch,
        )
        record = launch(spec, RunStore(), visible)
    except SpecError as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"could not start the run: {err}")
    print(f"command: {shlex.join(build_command(spec, record.id))}")
    for argv in other_node_commands(spec, record.id):
        print(f"on node {argv[argv.index('--node-rank') + 1]}: {shlex.join(argv)}")
    print(f"logs:    gpumon logs {record.id} --follow")
    if record.state in ("failed", "lost"):
        print(f"gpumon: the run ended at once ({record.state}); see: gpumon logs {record.id}", file=sys.stderr)
    print(f"{record.state} {record.id}", flush=True)
    if args.follow:
        return _follow(record.id, 0, 0)
    return 0


def _summaries() -> list[Any]:
    from gpumon.core.runs.monitor import RunsMonitor

    return RunsMonitor().refresh()


def cmd_runs(args: argparse.Namespace) -> int:
    summaries = _summaries()
    if args.json:
        docs = []
        for s in summaries:
            doc = s.record.to_dict()
            doc.update(step=s.step, loss=s.loss, samples_per_s=s.samples_per_s, memory_bytes=s.memory)
            docs.append(doc)
        print(json.dumps({"schema": 1, "runs": docs}, indent=2))
        return 0
    if not summaries:
        print("no runs yet: start one with 'gpumon launch ddp' or press n in gpumon's Runs view")
        return 0
    rows = [("ID", "KIND", "STATUS", "EXIT", "ELAPSED", "STEP", "LOSS", "SAMPLES/S", "MEMORY", "PROGRAM")]
    for s in summaries:
        r = s.record
        rows.append(
            (
                s.id,
                r.spec.kind,
                s.state,
                "" if r.exit_code is None else str(r.exit_code),
                fmt.duration(r.elapsed()),
                "" if s.step is None else str(s.step),
                "" if s.loss is None else f"{s.loss:.4f}",
                "" if s.samples_per_s is None else f"{s.samples_per_s:.0f}",
                "" if s.memory is None else fmt.size(s.memory),
                r.spec.label(),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _resolve(text: str) -> Any:
    from gpumon.core.runs.store import RunStore

    return RunStore().resolve(text)


def cmd_logs(args: argparse.Namespace) -> int:
    from gpumon.core.runs.store import RunNotFound
    from gpumon.core.runs.telemetry import tail_lines

    try:
        record = _resolve(args.run)
    except RunNotFound as err:
        return fail(str(err))
    rank = None if args.launcher else (args.rank or 0)
    path = record.log_path(rank)
    if not path.exists():
        if rank is not None and rank not in record.log_ranks() and record.log_ranks():
            return fail(f"{record.id} has no rank {rank}; its ranks: {', '.join(map(str, record.log_ranks()))}")
        if not args.follow:
            return fail(f"{record.id} has no log yet at {path}")
    if not args.follow:
        for line in tail_lines(path, args.lines):
            print(line)
        return 0
    return _follow(record.id, rank, args.lines)


def _follow(run_id: str, rank: int | None, first: int) -> int:
    """Print the log as it grows until the run has ended and nothing more comes."""
    from gpumon.core.runs.store import RunStore
    from gpumon.core.runs.telemetry import tail_lines

    store = RunStore()
    record = store.resolve(run_id)
    path = record.log_path(rank)
    for line in tail_lines(path, first):
        print(line, flush=True)
    try:
        offset = path.stat().st_size
    except OSError:
        offset = 0
    while True:
        live = record.live
        try:
            with path.open("rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError:
            data = b""
        if data:
            offset += len(data)
            sys.stdout.write(data.decode(errors="replace"))
            sys.stdout.flush()
        elif not live:
            print(f"[{record.id} {record.state}, exit code {record.exit_code}]")
            return 0
        time.sleep(0.2)
        record = store.load(record.dir) or record


def cmd_stop(args: argparse.Namespace) -> int:
    from gpumon.core.runs.launcher import STOP_GRACE_S, stop, wait
    from gpumon.core.runs.store import RunNotFound, RunStore

    try:
        record = _resolve(args.run)
    except RunNotFound as err:
        return fail(str(err))
    if args.trial is not None:
        from gpumon.cli_tune import stop_trial

        return stop_trial(record, args.trial)
    if not record.live:
        print(f"{record.id} is not running ({record.state})")
        return 0
    try:
        print(stop(record, kill=args.kill), flush=True)
        if record.spec.kind == "tune" and not args.kill and not args.no_wait:
            # The search ends its trials itself; past the grace period it is stopped like any run.
            record = wait(record, RunStore(), timeout=STOP_GRACE_S)
            if record.live:
                print(stop(record), flush=True)
    except PermissionError:
        return fail(f"permission denied stopping {record.id}: run gpumon as the user who started it")
    if args.no_wait:
        return 0
    final = wait(record, RunStore(), timeout=STOP_GRACE_S + 10)
    print(f"{final.state} {final.id}")
    return 0 if not final.live else 1
