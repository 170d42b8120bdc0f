"""``gpumon launch ... --queue`` and ``gpumon queue [--json] | cancel | up | down | start RUN`` (docs/queue.md)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from gpumon.cli.common import fail, print_table, whole


def add_queue_options(launch: argparse.ArgumentParser) -> None:
    """launch's queue options, in one block."""
    group = launch.add_argument_group("queue (docs/queue.md)")
    group.add_argument(
        "--queue",
        action="store_true",
        help="wait in this host's queue instead of starting now; --gpus N is then a count (the queue picks which)",
    )
    group.add_argument("--gpu-mem", metavar="SIZE", help="with --queue: free memory each GPU needs, e.g. 20G")
    group.add_argument("--after", metavar="RUN[,RUN]", help="with --queue: start once these runs finished successfully")
    group.add_argument("--priority", type=int, metavar="P", help="with --queue: higher starts first (default 0)")
    group.add_argument(
        "--slots", type=whole(1), metavar="N", help="with --queue, a run with no GPU: at most N queued CPU runs at once"
    )


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    queue = sub.add_parser(
        "queue",
        parents=[parent],
        help="the runs waiting in this host's queue, their order and why they wait",
        description="Without an action: list the queue. Runs get there with 'gpumon launch ... --queue'.",
        epilog="examples: gpumon queue | gpumon queue up ddp-1125 | gpumon queue cancel ddp-1125",
    )
    queue.add_argument("action", nargs="?", choices=("cancel", "up", "down", "start"), help="what to do to RUN")
    queue.add_argument("run", nargs="?", help="the queued run (id or unique prefix)")
    queue.add_argument("--json", action="store_true", help="print the queue as JSON")


def cmd_launch_queued(args: argparse.Namespace, rest: list[str], build_spec: Callable[..., Any]) -> int:
    """``launch --queue``; ``build_spec``: launch's own (passed in: launch imports this module)."""
    from gpumon.core.gpu import visible_gpu_count
    from gpumon.core.placement.base import Launch
    from gpumon.core.placement.places import Queued
    from gpumon.core.queue.submit import parse_after, parse_size
    from gpumon.core.runs.record.spec import SpecError, default_nproc
    from gpumon.core.runs.record.store import RunStore

    if not args.queue:
        return fail("--gpu-mem, --after, --priority and --slots go with --queue")
    if args.follow:
        return fail("--follow needs a started run: once it starts, gpumon logs RUN --follow")
    if args.hosts is not None or args.nnodes > 1:
        return fail("--queue starts runs on this host only: drop --hosts/--nnodes, or queue each node's launch")
    count = 0
    if args.gpus is not None:
        if not args.gpus.strip().isdigit():
            return fail(
                f"with --queue, --gpus is how many GPUs (e.g. --gpus 2), not {args.gpus!r}: the queue picks which"
            )
        count = int(args.gpus)
    if args.gpu_mem and not count:
        return fail("--gpu-mem is per GPU: add --gpus N")
    if args.slots is not None and count:
        return fail("--slots is for runs with no GPU: drop --gpus, or drop --slots")
    store = RunStore()
    try:
        gpu_mem = parse_size(args.gpu_mem) if args.gpu_mem else None
        after = parse_after(args.after, store)
        visible = max(visible_gpu_count(), count)  # checked against the GPUs the keeper sees, when it starts it
        nproc = args.nproc or default_nproc(args.kind, ",".join(map(str, range(count))) or None, visible)
        spec = build_spec(args, rest, None, nproc)
        place = Queued(gpus=count, gpu_mem=gpu_mem, after=after, priority=args.priority or 0, slots=args.slots)
        record = place.launch(spec, Launch(store, visible))
    except SpecError as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"could not queue the run: {err}")
    if args.json:
        print(json.dumps({"id": record.id, "dir": str(record.dir), "state": record.state}), flush=True)
        return 0
    print(f"queued:  gpumon queue   cancel: gpumon queue cancel {record.id}")
    print(f"queued {record.id}", flush=True)
    return 0


def queue_docs() -> list[dict[str, Any]]:
    """The waiting and queue-started runs, in queue order, with position and reason."""
    from gpumon.core.queue import entry as q
    from gpumon.core.queue.keeper import ensure_keeper
    from gpumon.core.runs.record.store import RunStore

    store = RunStore()
    ensure_keeper(store.root)  # a keeper that died: the next gpumon that looks starts one
    plan = q.read_plan(store.root)
    out = []
    for entry in q.load_all(store.root):
        record = store.load(store.runs_dir / entry.run)
        if record is None:
            continue
        place = q.queue_fields(store.root, entry.run, plan)
        waiting = entry.state == q.WAITING and record.state == q.QUEUED
        out.append(
            {
                "id": entry.run,
                "status": record.state,
                "program": record.spec.label(),
                "queue_position": place["queue_position"] if waiting else None,
                "queue_reason": place["queue_reason"] if waiting else None,
                "gpus": entry.gpus,
                "gpu_mem": entry.gpu_mem,
                "after": list(entry.after),
                "priority": entry.priority,
                "slots": entry.slots,
                "submitted": entry.submitted,
                "assigned": list(entry.assigned) or None,
            }
        )
    return out


def cmd_queue(args: argparse.Namespace) -> int:
    from gpumon.core.queue import submit
    from gpumon.core.runs.record.store import RunNotFound, RunStore

    if args.action is None:
        if args.run:
            return fail("say what to do to the run: gpumon queue cancel|up|down|start RUN")
        docs = queue_docs()
        if args.json:
            print(json.dumps({"queue": docs}, indent=2))
            return 0
        if not docs:
            print("the queue is empty: queue a run with 'gpumon launch ... --queue'")
            return 0
        rows = [("#", "ID", "STATUS", "GPUS", "PRIORITY", "PROGRAM", "WHY")]
        for d in docs:
            gpus = str(d["gpus"] or "cpu") if d["assigned"] is None else ",".join(map(str, d["assigned"]))
            pos = "" if d["queue_position"] is None else str(d["queue_position"])
            why = d["queue_reason"] or ""
            rows.append((pos, d["id"], d["status"], gpus, str(d["priority"]), d["program"], why))
        print_table(rows)
        return 0
    if not args.run:
        return fail(f"gpumon queue {args.action} needs a run: gpumon queue {args.action} RUN")
    store = RunStore()
    try:
        record = store.resolve(args.run)
    except RunNotFound as err:
        return fail(str(err))
    if args.action == "cancel":
        if not submit.cancel(store.root, record.id):
            return fail(
                f"{record.id} is not waiting in the queue ({record.state}): stop it with gpumon stop {record.id}"
            )
        print(f"cancelled {record.id}")
        return 0
    if not submit.is_queued(record):
        return fail(f"{record.id} is not waiting in the queue ({record.state})")
    if args.action == "start":
        print(submit.start_now(store.root, record.id))
    else:
        print(submit.move(store.root, record.id, -1 if args.action == "up" else 1))
    return 0
