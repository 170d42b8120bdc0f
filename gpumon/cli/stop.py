"""``gpumon stop``: a run ended wherever it lives (its supervisor asked, or every process of it signalled when
none answers), waited for, and what is left of it named (exit 1), never "stopped" while a process it started
lives."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from gpumon.cli.common import fail
from gpumon.cli.runs import _resolve
from gpumon.cli.tune import stop_trial


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
