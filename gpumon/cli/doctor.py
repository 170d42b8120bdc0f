"""``gpumon doctor RUN``: memory growth per iteration, the leak's cause, the failure and what to change."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from gpumon.cli.common import fail

CENSUS_WAIT_S = 120.0


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    doctor = sub.add_parser(
        "doctor",
        parents=[parent],
        help="explain a run: memory growth per iteration, a leak's cause, a failure, and the fix",
        description="Diagnose a run from its files: the memory trend of each rank, the classified failure with "
        "ranked advice, and with --census the live tensors that grow (the run must be alive).",
    )
    doctor.add_argument("run", nargs="?", default="last", help="run id or unique prefix (default: the newest run)")
    doctor.add_argument("--json", action="store_true", help="print JSON for scripts")
    doctor.add_argument(
        "--census", action="store_true", help="ask the live run for two tensor censuses and name what grows"
    )
    doctor.add_argument("--gap", type=int, default=20, metavar="STEPS", help="steps between the two censuses")
    doctor.add_argument(
        "--snapshot",
        nargs="?",
        const="",
        metavar="FILE",
        help="summarise the CUDA allocator snapshot the run kept (pymem/oom0.pickle...; default: each one)",
    )
    doctor.add_argument("--host", metavar="HOST", help="a run on that host: its own gpumon doctor, through ssh")
    doctor.add_argument("--ssh", metavar="CMD", default=argparse.SUPPRESS, help="with --host: the ssh program")


def cmd_doctor(args: argparse.Namespace) -> int:
    from gpumon.core.doctor.leak import LeakWatch
    from gpumon.core.doctor.report import diagnose
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.record.store import RunNotFound, RunStore

    if args.host is not None and args.host.strip() != "local":
        from gpumon.cli.fleet import cmd_remote_doctor

        return cmd_remote_doctor(args)
    if args.snapshot is not None:
        from gpumon.cli.snapshot import cmd_snapshot

        return cmd_snapshot(args)
    store = RunStore()
    try:
        record = store.resolve(args.run)
    except RunNotFound as err:
        return fail(str(err))
    if args.census:
        if not record.live:
            return fail(f"{record.id} is {record.state}: a census needs a live run (it looks inside its processes)")
        if args.gap < 1:
            return fail(f"--gap must be at least 1, got {args.gap}")
        from gpumon.core.protocol import request_census

        request_census(record.dir, args.gap)
        if not args.json:
            print(f"asked {record.id} for two censuses {args.gap} steps apart...", flush=True)
        deadline = time.monotonic() + CENSUS_WAIT_S
        telemetry, watch = RunTelemetry(record.dir), LeakWatch()  # kept: each pass reads only what is new
        while True:
            record = store.load(record.dir) or record
            telemetry.update()
            diagnosis = diagnose(record, telemetry, watch=watch)
            if not diagnosis.census_pending or not record.live or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if diagnosis.census_pending and not args.json:
            print("no census came back: does the run import torch and step an optimizer under gpumon?")
    else:
        diagnosis = diagnose(record)
    if args.json:
        print(json.dumps(diagnosis.to_dict(), indent=2))
        return 0
    from gpumon.core.visible import visible_log

    print(visible_log("\n".join(render(diagnosis, record)), colour=False))  # it quotes the run's log and name
    return 0


def render(diagnosis: Any, record: Any) -> list[str]:
    """The diagnosis as plain text, most important first."""
    from gpumon.core.doctor.oom_blocks import oom_lines
    from gpumon.core.format import size
    from gpumon.core.runs.record.store import disk_note

    exit_text = f", exit code {record.exit_code}" if record.exit_code not in (None, 0) else ""
    lines = [f"{record.id}  {record.state}{exit_text}  {diagnosis.headline()}"]
    if diagnosis.step_time_s:
        from gpumon.core.runs.reading.progress import rate_text

        quiet = f": {diagnosis.quiet}" if diagnosis.quiet else ", over the last 2 minutes"
        lines.append(f"  pace: {rate_text(diagnosis.step_time_s)} by the wall clock{quiet}")
    if diagnosis.ledger.get("wall"):  # where the wall time went (core/runs/reading/ledger.py)
        from gpumon.core.runs.reading.ledger import ledger_line

        lines.append(f"  time: {ledger_line(diagnosis.ledger)}")
    note = disk_note(record.dir.parent.parent, {record.id: None} if record.live else {})
    if note:
        lines.append(f"  {note}")
    if diagnosis.stall is not None:
        from gpumon.core.doctor.stall_text import stall_section

        lines.append("\nstalled:" if diagnosis.stalled else "\nlast stall:")
        lines += [f"  {line}" for line in stall_section(diagnosis.stall, diagnosis.stalled, record.dir)]
    if diagnosis.restarts:
        from gpumon.core.runs.reading.attempts import restart_line

        lines.append(f"\nrestarts (torchrun, --max-restarts {record.spec.max_restarts}):")
        lines += [f"  {restart_line(r)}" for r in diagnosis.restarts]
    if diagnosis.leaks:
        lines.append("\nmemory per iteration:")
        for rank, state in diagnosis.leaks.items():
            current = f", now {size(state.current)}" if state.current is not None else ""
            lines.append(f"  rank {rank}: {state.describe()}{current}")
    from gpumon.core.doctor.straggler import slow_lines

    if slowness := slow_lines(diagnosis.slow, diagnosis.lanes):
        lines.append("\nwhat slows it, the larger cost first:")
        lines += [f"  {line}" for line in slowness]
    elif diagnosis.lanes_unknown:  # ranks on a GPU: no straggler can be named from the host's clocks
        lines.append(f"\nthe slow rank: {diagnosis.lanes_unknown}")
    if diagnosis.loss is not None:
        lines.append(f"\nloss: {diagnosis.loss.text}")
        lines += [f"  {label}: {said}" for label, said in diagnosis.loss.details()]
    if diagnosis.causes:
        lines.append("\nwhat grows (tensor census):")
        for cause in diagnosis.causes:
            lines += [f"  rank {cause.rank}: {cause.title}", f"    seen: {cause.evidence}", f"    fix:  {cause.advice}"]
    elif diagnosis.census_pending:
        lines.append("\na tensor census was asked for and has not come back yet")
    elif diagnosis.censused:
        first, second = diagnosis.censused
        lines.append(
            f"\nthe tensor census at steps {first} and {second} saw no tensors or autograd graphs grow: "
            "what grows is not torch's (Python objects, a C extension, the allocator's cache)"
        )
    elif record.live and any(s.grows for s in diagnosis.leaks.values()):
        lines.append(f"\nto name the cause: gpumon doctor {record.id} --census")
    failure = diagnosis.failure
    if failure is not None and failure.kind == "stopped":
        lines.append(f"\n{failure.title.lower()}")
    elif failure is not None:
        rank = f" (rank {failure.rank})" if failure.rank is not None else ""
        lines.append(f"\nfailure{rank}: {failure.title}")
        lines += [f"  {line}" for line in failure.shown_evidence]
        if failure.detail:
            lines.append(f"  {failure.detail}")
        lines += [f"  {line}" for line in oom_lines(failure.snapshot)]  # what held the GPU (oom_blocks.py)
        if failure.kind == "unknown" and not diagnosis.collectives:
            lines.append(f"  (not a known pattern: the whole error is in gpumon logs {record.id})")
    if diagnosis.collectives:
        lines.append("\ncollectives (each rank's last started and finished):")
        lines += [f"  {line}" for line in diagnosis.collectives]
    dumps = record.dir / "fr"
    try:  # NCCL's dumps at its timeout (launcher.py turned the recorder on); another user's run: not readable
        dumped = any(p.name.startswith("rank_") for p in dumps.iterdir())
    except OSError:
        dumped = False
    if dumped:
        lines.append(f"\nFlight Recorder dumps: python -m torch.distributed.flight_recorder.fr_trace {dumps} -p rank_")
    if diagnosis.advice:
        lines.append("\nwhat to change, best first:")
        for n, advice in enumerate(diagnosis.advice, 1):
            lines += [f"  {n}. {advice.title}", f"     why:    {advice.why}", f"     change: {advice.change}"]
    return lines
