"""``gpumon launch KIND [PROGRAM] [-- ARGS]``: start a training run in the background.

Nothing here imports torch (the run's own processes do).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from typing import Any

from gpumon.cli.common import announce_start, fail, whole
from gpumon.core.runs.record.spec import KINDS
from gpumon.core.visible import visible as visible_text


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
    launch.intermixed = True  # an optional program after KIND: argparse alone takes it empty at an option
    launch.add_argument("--module", "-m", metavar="NAME", help="run a Python module instead of a script")
    launch.add_argument("--nproc", type=whole(1), help="processes per node (ddp: GPUs, or 2 on a CPU)")
    launch.add_argument("--force", action="store_true", help="start --nproc beyond 4 x max(CPUs, GPUs) anyway")
    launch.add_argument("--gpus", metavar="IDS", help="GPU indexes for CUDA_VISIBLE_DEVICES, e.g. 0,1")
    launch.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment")
    launch.add_argument("--name", help="a label shown beside the id")
    launch.add_argument("--max-restarts", type=whole(0), default=0, help="torchrun restarts after a failure")
    launch.add_argument("--nnodes", type=whole(1), default=1, help="nodes in a multi-node run")
    launch.add_argument("--node-rank", type=whole(0), default=0, help="this node's rank (multi-node)")
    launch.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous on the first node (multi-node)")
    launch.add_argument("--rdzv-id", help="rendezvous id shared by all nodes (default: this run's id)")
    launch.add_argument("--group", metavar="ID", help="the multi-node group this node belongs to (set by --hosts)")
    launch.add_argument("--cwd", metavar="DIR", help="the directory the run starts in (default: this one)")
    launch.add_argument("--json", action="store_true", help="print the started run (or group) as one JSON line")
    launch.add_argument(
        "--hosts",
        metavar="A,B,...",
        help="one node per host, node 0 on the first (torchrun's rendezvous on a free port there); "
        "'local' is this machine; reached with ssh",
    )
    launch.add_argument("--ssh", metavar="CMD", help="with --hosts: the ssh command (default $GPUMON_SSH or ssh)")
    launch.add_argument(
        "--rdzv-host",
        metavar="ADDR",
        help="with --hosts: the address the other nodes reach the first host by (default: its name as given)",
    )
    launch.add_argument("--follow", "-f", action="store_true", help="then follow rank 0's log until the run ends")
    launch.add_argument(
        "--oom-retry", action="store_true", help="after an out-of-memory failure, relaunch with half the --batch-size"
    )
    launch.add_argument(
        "--keep-batch", action="store_true", help="with --oom-retry: double --accum-steps as the batch halves"
    )
    launch.add_argument(
        "--on-alert",
        metavar="CMD",
        help="run CMD (split like a shell would, never run by one) with the alert's text as its last argument "
        "when the run first leaks or fails, e.g. 'notify-send gpumon'",
    )
    slurm = launch.add_argument_group("as a Slurm job (defaults from [slurm] in config.toml)")
    slurm.add_argument("--slurm", action="store_true", help="submit the run as a Slurm job (sbatch)")
    slurm.add_argument("--nodes", type=whole(1), help="nodes of the job: one torchrun on each")
    slurm.add_argument("--gpus-per-node", type=whole(0), metavar="G", help="GPUs per node (--gpus-per-node)")
    slurm.add_argument("--partition", metavar="P", help="the partition to submit to")
    slurm.add_argument("--time", metavar="T", help="the job's time limit, as sbatch takes it (e.g. 4:00:00)")
    slurm.add_argument("--account", metavar="A", help="the account to charge")
    slurm.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more sbatch option, e.g. --sbatch-arg=--qos=high",
    )
    launch.add_argument(
        "--no-census",
        action="store_true",
        help="never ask the run for a tensor census by itself when its memory grows (the doctor still ranks fixes)",
    )
    from gpumon.cli.queue import add_queue_options

    add_queue_options(launch)  # --queue, --gpu-mem, --after, --priority, --slots (docs/queue.md)


def cmd_launch(args: argparse.Namespace, rest: list[str]) -> int:
    from gpumon.core.gpu import visible_gpu_count
    from gpumon.core.placement.places import launch
    from gpumon.core.runs.record.spec import SpecError, default_nproc, nproc_limit, parse_gpus
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import build_command, other_node_commands

    if args.module and args.program:
        return fail("give a script or --module, not both")
    queued = args.queue or args.gpu_mem or args.after or args.priority is not None or args.slots is not None
    if args.slurm and (queued or args.hosts is not None):
        return fail("--slurm: Slurm queues and places the job itself: drop --queue/--hosts (or --slurm)")
    if args.slurm:
        return cmd_launch_slurm(args, rest)
    if slurm_only(args):
        return fail(f"{slurm_only(args)} goes with --slurm (submit the run as a Slurm job)")
    if args.hosts is not None:
        return cmd_launch_group(args, rest)
    if queued:
        from gpumon.cli.queue import cmd_launch_queued

        return cmd_launch_queued(args, rest, build_spec)
    if args.ssh is not None or args.rdzv_host is not None:
        return fail("--ssh and --rdzv-host go with --hosts a,b")
    visible = visible_gpu_count()
    limit = nproc_limit(visible)
    if args.nproc and args.nproc > limit and not args.force:
        return fail(
            f"--nproc {args.nproc} is more than 4 x max(CPUs, GPUs) = {limit} on this machine: "
            "give fewer, or add --force"
        )
    try:
        gpus = parse_gpus(args.gpus, visible)
        spec = build_spec(args, rest, gpus, args.nproc or default_nproc(args.kind, gpus, visible))
        record = launch(spec, RunStore(), visible)
    except SpecError as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"could not start the run: {err}")
    if args.json:  # for the gpumon that started a group over ssh: the run, and node 0's rendezvous port
        doc = {k: v for k, v in record.to_dict().items() if k in JSON_KEYS}
        print(json.dumps({**doc, "state": record.state}), flush=True)
        return 0
    # The run's name and arguments are not ours: their control characters shown as text (^[), never sent raw.
    print(f"command: {visible_text(shlex.join(build_command(record.spec, record.id)))}")
    for argv in other_node_commands(record.spec, record.id):
        print(f"on node {argv[argv.index('--node-rank') + 1]}: {visible_text(shlex.join(argv))}")
    return announce_start(record, "run", args.follow)


SLURM_OPTIONS = ("nodes", "gpus_per_node", "partition", "time", "account", "sbatch_arg")


def slurm_only(args: argparse.Namespace) -> str | None:
    """The first Slurm option given without --slurm."""
    for name in SLURM_OPTIONS:
        if getattr(args, name) not in (None, []):
            return "--" + name.replace("_", "-")
    return None


def cmd_launch_slurm(args: argparse.Namespace, rest: list[str]) -> int:
    from gpumon.core.placement.places import launch
    from gpumon.core.runs.record.spec import SpecError
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.slurm.commands import missing
    from gpumon.core.slurm.submit import with_defaults

    if problem := missing("sbatch"):
        return fail(problem)
    try:
        options = with_defaults(
            {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "partition": args.partition,
             "time": args.time, "account": args.account, "sbatch_args": tuple(args.sbatch_arg)}
        )  # fmt: skip
        nproc = args.nproc or (options.gpus_per_node or (2 if args.kind == "ddp" else 1))
        if args.kind == "pipeline":
            nproc = args.nproc or 2
        spec = build_spec(args, rest, None if args.gpus is None else args.gpus, nproc, options.to_dict())
        record = launch(spec, RunStore(), 0)
    except SpecError as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"could not submit the run: {err}")
    job = record.status.get("slurm_job_id")
    if args.json:
        print(json.dumps({"id": record.id, "dir": str(record.dir), "slurm_job_id": job, "state": record.state}))
        return 0
    print(f"submitted job {job}: sbatch {visible_text(shlex.join(record.status.get('sbatch', [])[1:]))}")
    print(f"status:  gpumon runs   stop (scancel): gpumon stop {record.id}")
    print(f"pending {record.id}", flush=True)
    if args.follow:
        return subprocess.call(
            [sys.executable, "-m", "gpumon", "logs", record.id, "--follow"], stdin=subprocess.DEVNULL
        )
    return 0


JSON_KEYS = ("id", "kind", "dir", "group", "nnodes", "node_rank", "rdzv_endpoint")


def build_spec(
    args: argparse.Namespace, rest: list[str], gpus: str | None, nproc: int, slurm: dict[str, Any] | None = None
) -> Any:
    """The RunSpec the options describe (validated by the launcher, on the node that runs it)."""
    from gpumon.core.runs.record.spec import RunSpec, SpecError, parse_env

    if args.cwd is not None and not os.path.isdir(args.cwd):
        raise SpecError(f"--cwd {args.cwd}: no such directory on this host")
    return RunSpec(
        kind=args.kind,
        program=f"-m {args.module}" if args.module else args.program,
        args=tuple(rest),
        nproc=nproc,
        gpus=gpus,
        env=parse_env(args.env),
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint,
        rdzv_id=args.rdzv_id,
        max_restarts=args.max_restarts,
        cwd=os.path.abspath(args.cwd) if args.cwd else os.getcwd(),
        name=args.name,
        oom_retry=args.oom_retry,
        no_census=args.no_census,
        on_alert=alert_command(args.on_alert),
        keep_batch=args.keep_batch,
        group=args.group,
        slurm=slurm,
    )


def alert_command(text: str | None) -> tuple[str, ...]:
    """``--on-alert``'s argument list. Raises SpecError for a shell line, which would run as arguments."""
    from gpumon.core.runs.record.spec import SpecError
    from gpumon.core.runs.supervision.alerts import shell_operator

    if not text:
        return ()
    operator = shell_operator(text)
    if operator is not None:
        raise SpecError(
            f"--on-alert runs its command without a shell, so {operator!r} would only be an argument: "
            "for a shell line use sh -c (the alert's text is $GPUMON_ALERT), e.g. "
            """--on-alert 'sh -c "echo $GPUMON_ALERT >> alerts.txt"', or put it in a script"""
        )
    try:
        return tuple(shlex.split(text))
    except ValueError as err:
        raise SpecError(f"--on-alert: {err}: quote it as in a shell") from None


def cmd_launch_group(args: argparse.Namespace, rest: list[str]) -> int:
    from gpumon.core.fleet.hosts import HostError, parse_hosts
    from gpumon.core.nodes.group import GroupError, configured_reach
    from gpumon.core.placement.base import Launch
    from gpumon.core.placement.places import Hosts
    from gpumon.core.runs.record.spec import SpecError
    from gpumon.core.runs.record.store import RunStore

    if args.nproc is None:
        return fail("--hosts needs --nproc: the processes on each node (its GPUs, e.g. --nproc 8)")
    try:
        hosts = parse_hosts(args.hosts)
        reach = configured_reach(args.ssh)
        gpus = args.gpus.replace(" ", "") if args.gpus else None  # each node checks them against its own GPUs
        spec = build_spec(args, rest, gpus, args.nproc)
    except (HostError, SpecError, GroupError) as err:
        return fail(str(err))
    try:
        group = Hosts(hosts, reach, args.rdzv_host).launch(spec, Launch(RunStore(), 0))  # each node checks its GPUs
    except GroupError as err:
        return fail(str(err))
    if args.json:
        print(json.dumps(group.to_dict()), flush=True)
        return 0
    print(f"group {group.id}: {len(group.nodes)} nodes, rendezvous {group.rdzv_endpoint}")
    for node in group.nodes:
        print(f"node {node.rank}  {visible_text(node.host)}  {node.run}")
    print(f"status:  gpumon runs   stop: gpumon stop {group.id}")
    print(f"running {group.id}", flush=True)
    if args.follow:  # node 0's log, read where it runs
        first = group.nodes[0]
        return subprocess.call(reach.argv(group.host(first), ["logs", first.run, "--follow"]), stdin=subprocess.DEVNULL)
    return 0
