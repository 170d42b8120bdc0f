"""``gpumon runs | logs | stop``: list runs, print a run's log, stop a run (``launch`` starts one)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from gpumon.cli.common import fail, follow, print_table, whole
from gpumon.core import format as fmt


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    runs = sub.add_parser("runs", parents=[parent], help="list runs (id, kind, status, step, loss, memory)")
    runs.add_argument("--json", action="store_true", help="print JSON: id, kind, status, exit code, times, dir")
    runs.add_argument("run", nargs="*", help="only these runs (ids or unique prefixes); default every run and group")
    runs.add_argument(
        "--recent", type=whole(0), metavar="N", help="with --json: only live runs and the newest N ended ones"
    )

    logs = sub.add_parser("logs", parents=[parent], help="print a run's log (rank 0 unless --rank)")
    logs.add_argument("run", help="run id or a unique prefix; 'last' for the newest")
    logs.add_argument("--rank", type=whole(0), help="which rank's log (default 0)")
    logs.add_argument("--launcher", action="store_true", help="torchrun's own output instead of a rank's")
    logs.add_argument("--lines", "-n", type=whole(0), default=50, help="lines to print first (default 50)")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    logs.add_argument("--host", metavar="HOST", help="a run on that host, through ssh (see gpumon fleet)")
    logs.add_argument("--ssh", metavar="CMD", default=argparse.SUPPRESS, help="with --host: the ssh program")

    stop = sub.add_parser("stop", parents=[parent], help="stop a run: SIGTERM, then SIGKILL after 10 s")
    stop.add_argument("run", help="run or group id or a unique prefix; 'last' for the newest run")
    stop.add_argument("--kill", action="store_true", help="SIGKILL at once")
    stop.add_argument("--no-wait", action="store_true", help="return without waiting for the run to end")
    stop.add_argument("--trial", metavar="ID", help="a search (kind tune): stop only this trial")
    stop.add_argument(
        "--node-only", action="store_true", help="a node of a multi-node group: stop this node only (its peers fail)"
    )

    prune = sub.add_parser(
        "prune",
        parents=[parent],
        help="remove old ended runs (or only their raw events); lists first, --yes removes",
        description="Never touches a live run. Without --yes it only lists what it would remove.",
        epilog="examples: gpumon prune --older-than 30 | gpumon prune --keep 200 --events --yes",
    )
    prune.add_argument("--older-than", type=whole(0), metavar="DAYS", help="ended more than DAYS days ago")
    prune.add_argument("--keep", type=whole(0), metavar="N", help="all but the newest N ended runs")
    prune.add_argument("--events", action="store_true", help="remove only raw events: runs stay listed and diagnosable")
    prune.add_argument("--yes", action="store_true", help="remove them (default: list them and remove nothing)")


def _summaries() -> list[Any]:
    from gpumon.core.runs.reading.monitor import RunsMonitor

    return RunsMonitor(adopt=True).refresh()


HEADER = (
    "ID",
    "KIND",
    "STATUS",
    "EXIT",
    "ELAPSED",
    "STEP",
    "PROGRESS",
    "SPEED",
    "LOSS",
    "SAMPLES/S",
    "MFU",
    "TOKENS/S",
    "MEMORY",
    "RSS",
    "PROGRAM",
)


def cmd_runs(args: argparse.Namespace) -> int:
    from gpumon.cli.group import group_docs, group_row, print_causes
    from gpumon.core.runs.reading.progress import progress_text, rate_text
    from gpumon.core.runs.reading.summary import read_one
    from gpumon.core.runs.reading.use import mfu_text
    from gpumon.core.runs.reading.use import rate_text as use_rate
    from gpumon.core.runs.record.listing import RUNS_SCHEMA, newest_first, recent, run_doc
    from gpumon.core.runs.record.store import RunNotFound, RunStore, disk_note

    if args.run:  # named runs only (what a multi-node group's launcher asks each host), no groups
        try:
            summaries = [read_one(_resolve(text)) for text in args.run]
        except RunNotFound as err:
            return fail(str(err))
        groups: list[dict[str, Any]] = []
    else:  # newest first, as the Runs view lists them
        summaries = newest_first(_summaries())
        groups = sorted(group_docs(RunStore().root, settle=not args.readonly), key=_created, reverse=True)
    note = disk_note(RunStore().root, {s.id: s.step for s in summaries if s.record.live})
    if note:
        print(f"gpumon: {note}", file=sys.stderr)
    from gpumon.core.runs.record.index import NOTICES

    for line in NOTICES:
        print(f"gpumon: {line}", file=sys.stderr)
    if args.json:
        docs = [run_doc(s) for s in recent(summaries, args.recent)]
        print(json.dumps({"schema": RUNS_SCHEMA, "runs": docs, "groups": groups}, indent=2))
        return 0
    if not summaries and not groups:
        print("no runs yet: start one with 'gpumon launch ddp' or press n in gpumon's Runs view")
        return 0
    rows: list[tuple[float, tuple[str, ...]]] = [(_created(doc), group_row(doc)) for doc in groups]
    for s in summaries:
        r = s.record
        rows.append(
            (
                r.created,
                (
                    s.id,
                    r.spec.kind,
                    _state_cell(s),
                    "" if r.exit_code is None else str(r.exit_code),
                    fmt.duration(r.elapsed()),
                    "" if s.step is None else str(s.step),
                    progress_text(s.progress, s.eta_s),  # "37% 4m12s"
                    rate_text(s.step_time_s),  # "12.3 it/s", "4.2 s/it"
                    fmt.loss(s.loss),  # 3 significant digits; nan, inf and -inf as such
                    "" if s.samples_per_s is None else f"{s.samples_per_s:.0f}",
                    mfu_text(s.use.get("mfu")),  # "41%", "—" on a CPU or an unknown GPU (core/runs/reading/use.py)
                    use_rate(s.use.get("tokens_per_s"), "tok/s"),
                    "" if s.memory is None else f"{fmt.size(s.memory)} {s.memory_kind}",  # heap, or cuda:N allocated
                    "" if s.rss is None else fmt.size(s.rss),
                    r.spec.label() + (f" (node {r.spec.node_rank} of {r.spec.group})" if r.spec.group else ""),
                ),
            )
        )
    if not args.run:  # a group among its runs by its creation time (the named runs keep the order asked)
        rows.sort(key=lambda row: row[0], reverse=True)
    print_table([HEADER, *(cells for _, cells in rows)])
    print_causes(groups)
    _print_queue_reasons(summaries)
    for s in summaries:  # a damaged file: said under the table, or the row's odd times go unexplained
        if s.record.unreadable:
            print(f"{s.id} {s.state}: unreadable: {'; '.join(s.record.unreadable)}")
        elif s.record.status.get("deleted"):  # its end kept in the index: why there is nothing more of it
            print(f"{s.id} {s.state}: {s.record.status['error']['message']}")
    return 0


def _print_queue_reasons(summaries: list[Any]) -> None:
    from gpumon.core.queue.entry import queue_fields

    queued = [s for s in summaries if s.state == "queued"]
    for s in sorted(queued, key=lambda s: queue_fields(s.record.dir.parent.parent, s.id)["queue_position"] or 1e9):
        fields = queue_fields(s.record.dir.parent.parent, s.id)
        print(f"{s.id} queued {fields['queue_position'] or '-'}: {fields['queue_reason']}")


def _state_cell(s: Any) -> str:
    """ "running", "failed !" (! : an alert, a leak reached, a failure), "queued 2" (its place in the queue)."""
    if s.state == "queued":
        from gpumon.core.queue.entry import queue_fields

        place = queue_fields(s.record.dir.parent.parent, s.id)["queue_position"]
        return f"queued {place}" if place else "queued"
    from gpumon.core.slurm.rows import slurm_fields, status_text

    quiet = f", {s.quiet}" if s.quiet else ""  # "running, no step for 1m28s": before the stall rule fires
    return status_text(s.record, slurm_fields(s.record)) + s.attempt_words + quiet + (" !" if s.alerts else "")


def _created(doc: dict[str, Any]) -> float:
    created = doc.get("created")
    return float(created) if isinstance(created, int | float) else 0.0


def _resolve(text: str) -> Any:
    from gpumon.core.runs.record.store import RunStore

    return RunStore().resolve(text)


def cmd_logs(args: argparse.Namespace) -> int:
    from gpumon.core.logs.tail import tail_lines, unreadable
    from gpumon.core.runs.record.store import RunNotFound
    from gpumon.core.visible import visible_log

    if args.host is not None and args.host.strip() != "local":
        from gpumon.cli.fleet import cmd_remote_logs

        return cmd_remote_logs(args)
    try:
        record = _resolve(args.run)
    except RunNotFound as err:
        return fail(str(err))
    rank = None if args.launcher else (args.rank or 0)
    path = record.log_path(rank)
    if rank is not None:
        try:
            found, ranks = _rank_log(record, rank)
        except OSError as err:  # another user's run: one line, never a traceback
            return fail(unreadable(path) or f"cannot read {record.id}'s ranks: {err.strerror or err}")
        if found is None and ranks:
            return fail(f"{record.id} has no rank {rank}; its ranks: {', '.join(map(str, ranks))}")
        if found is not None:
            path = found.path
            if found.note and args.rank is not None:  # asked for a rank's output, given one it shares: said so
                print(f"gpumon: {found.note}", file=sys.stderr, flush=True)
    problem = unreadable(path)  # another user's run, a FIFO or a link in the log's place: one line, never a hang
    if problem is not None:
        return fail(problem)
    if not os.path.lexists(path) and not args.follow:
        return fail(f"{record.id} has no log yet at {path}")
    if not args.follow:
        colour = sys.stdout.isatty()  # a script's colours on a terminal; every other escape shown, not obeyed
        for line in tail_lines(path, args.lines):
            print(visible_log(line, colour))
        return 0
    return follow(record.id, path, args.lines)


def _rank_log(record: Any, rank: int) -> tuple[Any, list[int]]:
    """(where rank's output is, or None; the run's ranks: those that reported or have a log)."""
    from gpumon.core.runs.reading.rank_rows import rank_log, rank_rows
    from gpumon.core.runs.reading.telemetry import RunTelemetry

    telemetry = RunTelemetry(record.dir)
    telemetry.update()  # the supervisor's summary, and the few events after it
    rows = rank_rows(telemetry)
    return rank_log(record, rank, rows), sorted({row.rank for row in rows} | set(record.log_ranks()))


def cmd_prune(args: argparse.Namespace) -> int:
    from gpumon.core.runs.record import prune
    from gpumon.core.runs.record.store import RunStore

    if args.older_than is None and args.keep is None:
        return fail("say what to prune: --older-than DAYS and/or --keep N (then --yes to remove)")
    store = RunStore()
    chosen = prune.select(store, args.older_than, args.keep, args.events)
    what = "raw events of" if args.events else ""
    total = fmt.size(sum(c.bytes for c in chosen))
    if not chosen:
        print("nothing to prune")
        return 0
    for candidate in chosen:
        print(f"{candidate.run_id}  {fmt.size(candidate.bytes)}")
    if not args.yes:
        noun = "run" if len(chosen) == 1 else "runs"
        print(f"would remove the {what} {len(chosen)} {noun} above ({total}): add --yes to remove".replace("  ", " "))
        return 0
    outcome = prune.apply(store, chosen, args.events)
    for candidate, why in outcome.kept:
        print(f"kept {candidate.run_id}: {why}")
    count, noun = len(outcome.removed), "run" if len(chosen) == 1 else "runs"
    which = f"the {what} {count}" if count == len(chosen) else f"{what} {count} of the {len(chosen)}"
    print(f"removed {which} {noun} above: {fmt.size(outcome.freed)} freed".replace("  ", " "))
    return 0
