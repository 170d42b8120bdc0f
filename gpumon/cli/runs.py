"""``gpumon runs | logs | stop``: list runs, print a run's log, stop a run (``launch`` starts one)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from gpumon.cli.common import fail, follow, print_table, whole
from gpumon.cli.tune import stop_trial
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
    return status_text(s.record, slurm_fields(s.record)) + quiet + (" !" if s.alerts else "")


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


def cmd_stop(args: argparse.Namespace) -> int:
    from gpumon.cli.group import cmd_stop_group, stop_nodes
    from gpumon.core.nodes.group import group_of, is_group_id
    from gpumon.core.placement.places import of_record
    from gpumon.core.runs.record.store import RunNotFound, RunStore
    from gpumon.core.runs.supervision import launcher as runs
    from gpumon.core.runs.supervision.control import stop_requested
    from gpumon.core.runs.supervision.launcher import STOP_GRACE_S, TUNE_STOP_GRACE_S, record_end, stop, wait

    if is_group_id(args.run):
        return cmd_stop_group(args.run, args.kill)
    try:
        record = _resolve(args.run)
    except RunNotFound as err:
        done = stop_homeless(args.run, args.kill)  # its directory deleted: found by its processes
        return fail(str(err)) if done is None else done
    if args.trial is not None:
        return stop_trial(record, args.trial)
    group = group_of(RunStore().root, record.id) if record.spec.group and not args.node_only else None
    if group is not None and record.live:  # a node of a group launched from here: the whole group stops
        print(f"{record.id} is node {record.spec.node_rank} of {group.id}: stopping every node")
        return stop_nodes(group, args.kill)
    place = of_record(record)
    withdrawn = place.withdraw(record) if record.state == "queued" else None  # out of the queue, not started
    if withdrawn:
        print(withdrawn)
        return 0
    if withdrawn is not None:
        record = record.reread()  # the keeper started it meanwhile: stopped like any run
    if not record.live:
        print(f"{record.id} is not running ({record.state})")
        return 0
    if not place.supervised_here:  # its place signals it (a job: scancel), then its end is waited for
        return stop_job(record, args.no_wait)
    supervised = runs.answering_supervisor(record) is not None
    asked = supervised and not (record.spec.kind == "tune" and not args.kill and not stop_requested(record.dir))
    since = time.time()
    try:
        print(stop(record, kill=args.kill), flush=True)
        if asked and not args.no_wait and not runs.answered(record, since):  # stopped, hung: stop goes round it
            pid = record.supervisor_pid()
            if pid:
                why = f"did not answer within {runs.ANSWER_S:.0f} s"
                print(runs.dismiss_supervisor(record.reread(), pid, why, args.kill), flush=True)
            supervised = False
        if record.spec.kind == "tune" and not args.kill and not args.no_wait:
            # The search ends its trials itself; past the grace period it is stopped like any run.
            record = wait(record, RunStore(), timeout=TUNE_STOP_GRACE_S)
            if record.live:
                print(stop(record), flush=True)
    except PermissionError:
        return fail(f"permission denied stopping {record.id}: run gpumon as the user who started it")
    if args.no_wait:
        return 0
    final = wait(record, RunStore(), timeout=STOP_GRACE_S + 10 if supervised else STOP_GRACE_S)
    if final.live and not supervised:  # nobody else sends the SIGKILL that follows the grace period
        print(stop(final, kill=True), flush=True)
        final = wait(final, RunStore(), timeout=5)
    final, left = settle(final)
    if final.live:
        pids = ", ".join(map(str, left)) or "none found"
        print(f"{final.id} is still {final.state} after the grace period: live processes {pids}", file=sys.stderr)
        return 1
    if left:
        pids = ", ".join(map(str, left))
        print(f"{final.id} is {final.state}, but {len(left)} of its processes outlived it: {pids}", file=sys.stderr)
        return 1
    if not supervised:
        record_end(final, "killed" if args.kill else "stopped", "gpumon stop, after its supervisor died")
        final = RunStore().load(final.dir) or final
    print(f"{final.state} {final.id}")
    if final.status.get("cgroup_why"):  # no cgroup: what this stop could and could not see, said
        print(f"note: {final.status['cgroup_why']}")
    return 0


def stop_homeless(text: str, kill: bool) -> int | None:
    """A run whose directory was deleted while it runs, found by its processes' marks and ended; None if none."""
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision import homeless
    from gpumon.core.runs.supervision.launcher import STOP_GRACE_S

    found = homeless.find(RunStore().runs_dir, text)
    if len(found) != 1:
        return None if not found else fail(f"{text!r} matches {len(found)} runs whose directory was deleted")
    run = found[0]
    print(f"{run.id}'s directory {run.dir} was deleted: ending its {len(run.procs)} processes by their mark")
    left, stubborn = homeless.end(run, kill, STOP_GRACE_S)
    if stubborn:
        print(f"{run.id}'s supervisor did not end on SIGTERM: killed it (pid {', '.join(map(str, stubborn))})")
    if left:
        print(f"{run.id}: processes still alive after SIGKILL: {', '.join(map(str, left))}", file=sys.stderr)
        return 1
    print(f"{'killed' if kill else 'stopped'} {run.id} (its directory was deleted)")
    return 0


def stop_job(record: Any, no_wait: bool) -> int:
    """A run that is a Slurm job: scancel it (pending or running), then wait for the end to be written."""
    from gpumon.core.placement.places import of_record
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import STOP_GRACE_S
    from gpumon.core.slurm import jobs

    try:
        print(of_record(record).stop(record), flush=True)
    except OSError as err:
        return fail(str(err))
    if no_wait:
        return 0
    deadline = time.monotonic() + STOP_GRACE_S + 60  # Slurm's KillWait (30 s by default) and the clean-up
    current = record
    while time.monotonic() < deadline:
        jobs.forget()
        current = RunStore().load(record.dir) or current
        if not current.live:
            break
        time.sleep(0.5)
    if current.state == "lost":  # the job is over and nothing on its node wrote the end
        of_record(current).end_lost(current)
        current = RunStore().load(record.dir) or current
    if current.live:
        print(f"{current.id} is still {current.state}: Slurm has not ended job {current.status['slurm_job_id']}")
        return 1
    print(f"{current.state} {current.id}")
    return 0


SETTLE_S = 15.0  # how long stop waits for a supervisor's clean-up (its sweep SIGKILLs stragglers within ~3 s)


def settle(record: Any) -> tuple[Any, list[int]]:
    """An ended run whose supervisor is still cleaning up (its last processes being reaped): wait for it,
    bounded, so stop never calls a run that is ending 'still stopped'."""
    from gpumon.core.runs.record.store import RunStore

    left = record.live_processes()
    if record.live or not left:
        return record, left
    print(f"{record.id} is {record.state}: waiting for its last {len(left)} process(es) to exit", flush=True)
    deadline = time.monotonic() + SETTLE_S
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        record = RunStore().load(record.dir) or record
        left = record.live_processes()
    return record, left


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
