"""The ranks that reported, one row each (rank, pid, step, host), and where each one's output went.

A run's ranks are the processes that wrote ``proc_start`` (docs/events.md "Ranks"), however they were started:
torchrun's workers, or children of the script (``torch.multiprocessing.spawn``, Lightning, ``mp.Process``).
Only torchrun's workers get a log of their own (``logs/rank<N>.log``, through a FIFO each); a rank the script
started writes to the output it inherited: the run's log (``rank0.log``), or its parent rank's log under
torchrun. Bytes that several processes write to one pipe carry no sender, so those ranks' lines cannot be
told apart: the shared log is shown, and said to be shared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpumon.core.runs.record.store import RunRecord, read_json


@dataclass(frozen=True)
class RankRow:
    rank: int
    pid: int | None  # its latest process (a restart is a new one)
    step: int | None  # its latest recorded optimizer step
    host: str | None
    started: str | None  # how it was started (``proc_start``): "multiprocessing spawn", "torchelastic", ...
    ppid: int | None = None  # its parent: a rank started by another rank writes to that rank's output

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "ppid"}


def rank_rows(telemetry: Any) -> tuple[RankRow, ...]:
    """Every rank that reported (``proc_start``), lowest first, with its latest pid and step."""
    latest: dict[int, int] = {}
    for pid, rank in telemetry.pids.items():  # in the order they reported: a restart's pid comes later
        latest[rank] = pid
    rows = []
    for rank in sorted(latest):
        start = telemetry.starts.get(rank, {})
        step = telemetry.progress.steps.get(rank)
        rows.append(
            RankRow(
                rank,
                latest[rank],
                step,
                _text(start.get("host")),
                _text(start.get("started")),
                start.get("ppid") if type(start.get("ppid")) is int else None,
            )
        )
    return tuple(rows)


def rows_from(data: Any) -> tuple[RankRow, ...]:
    """The rows an index row kept (``RankRow.to_dict``); () for an older row or one of another shape."""
    out = []
    for item in data if isinstance(data, list) else ():
        if isinstance(item, dict) and type(item.get("rank")) is int:
            pid, step = item.get("pid"), item.get("step")
            out.append(
                RankRow(
                    item["rank"],
                    pid if type(pid) is int else None,
                    step if type(step) is int else None,
                    _text(item.get("host")),
                    _text(item.get("started")),
                )
            )
    return tuple(out)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def proc_count(record: RunRecord, ranks: tuple[RankRow, ...]) -> int:
    """Processes per node: as launched (``--nproc``), or the ranks that reported where the script started more."""
    return max(record.spec.nproc, len(ranks))


STARTED = {
    "multiprocessing spawn": "spawned by the script",
    "multiprocessing fork": "forked by the script",
    "fork": "forked by the script",
    "multiprocessing forkserver": "started by the script's forkserver",
    "torchelastic": "started by the script's launcher",
    "ray train": "Ray Train's workers, whose output Ray sends to the script's",
}


@dataclass(frozen=True)
class RankLog:
    path: Path
    shared: tuple[int, ...] = ()  # the other ranks whose output is in the same log
    note: str = ""  # one line saying the log is shared, and whose it is


def rank_log(record: RunRecord, rank: int, rows: tuple[RankRow, ...]) -> RankLog | None:
    """Where ``rank``'s output is: its own log, else the log it shares (with a note); None for a rank that never
    reported and has no log."""
    by_rank = {row.rank: row for row in rows}
    torchrun = _torchrun(record)
    if rank not in by_rank and not record.log_path(rank).exists():
        return None
    holder = _holder(record, rank, by_rank, torchrun)
    path = record.log_path(holder)
    others = set(by_rank) | ({holder} if holder is not None else set())
    shared = tuple(r for r in sorted(others) if r != rank and _holder(record, r, by_rank, torchrun) == holder)
    if not shared:
        return RankLog(path)
    if holder is None:  # torchrun's own output: a torchrun that gives its workers no log (under Slurm)
        how, whose = "their output goes to torchrun's", "torchrun's output (gpumon logs --launcher)"
    elif torchrun[0]:
        how, whose = f"started by rank {holder}'s process", f"rank {holder}'s log"
    else:
        known = [STARTED[row.started] for r in (rank, *shared) if (row := by_rank.get(r)) and row.started in STARTED]
        how, whose = (known[0] if known else "started by the script"), "the run's log"
    names = ", ".join(map(str, shared))
    note = f"rank {rank} shares its output with rank{'s' if len(shared) > 1 else ''} {names} ({how}): showing {whose}"
    return RankLog(path, shared, note)


def _torchrun(record: RunRecord) -> tuple[bool, bool]:
    """(the run's command is torchrun: its output is launcher.log, there from the start; its workers have logs
    of their own: each writes ``logs/rank<N>.log`` through a FIFO, from its first line on)."""
    env = read_json(record.dir / "command.json").get("env")
    fifos = isinstance(env, dict) and bool(env.get("GPUMON_RANK_LOGS"))
    return record.log_path(None).exists(), fifos


def _holder(record: RunRecord, rank: int, by_rank: dict[int, RankRow], torchrun: tuple[bool, bool]) -> int | None:
    """Which log holds ``rank``'s output, by its rank number (None: torchrun's launcher.log). Outside torchrun
    the run's log (rank0.log: the script's output, which the processes it starts inherit); under torchrun the
    rank's own, else its parent rank's (a rank a worker started), else torchrun's own output."""
    if not torchrun[0]:
        return 0
    row = by_rank.get(rank)
    worker = torchrun[1] and (row is None or row.started == "torchelastic")  # its log comes with its first line
    if worker or record.log_path(rank).exists():
        return rank
    parent = next((r for r, other in by_rank.items() if row is not None and other.pid == row.ppid), None)
    return parent if parent is not None and record.log_path(parent).exists() else None


def sharing(record: RunRecord, rows: tuple[RankRow, ...]) -> dict[int | None, tuple[int, ...]]:
    """Log (by its rank number; None: torchrun's launcher.log) -> every reported rank whose output it holds, for
    the logs more than one rank writes to: {0: (0, 1)} for a script that spawned two ranks."""
    by_rank = {row.rank: row for row in rows}
    torchrun = _torchrun(record)
    holders: dict[int | None, list[int]] = {}
    for rank in sorted(by_rank):
        holders.setdefault(_holder(record, rank, by_rank, torchrun), []).append(rank)
    return {log: tuple(ranks) for log, ranks in holders.items() if len(ranks) > 1}
