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

from gpumon.core.runs.store import RunRecord


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
}


@dataclass(frozen=True)
class RankLog:
    path: Path
    shared: tuple[int, ...] = ()  # the other ranks whose output is in the same log
    note: str = ""  # one line saying the log is shared, and whose it is


def rank_log(record: RunRecord, rank: int, rows: tuple[RankRow, ...]) -> RankLog | None:
    """Where ``rank``'s output is: its own log, else the log it shares (with a note); None when it has no log
    and either never reported or its output went where gpumon does not know."""
    by_rank = {row.rank: row for row in rows}
    torchrun = record.log_path(None).exists()  # torchrun writes launcher.log; its workers each have a log
    holder = _holder(record, rank, by_rank, torchrun)
    if holder is None or (rank not in by_rank and not record.log_path(rank).exists()):
        return None
    path = record.log_path(holder)
    shared = tuple(
        r for r in sorted({*by_rank, holder}) if r != rank and _holder(record, r, by_rank, torchrun) == holder
    )
    if not shared:
        return RankLog(path)
    if torchrun:
        how, whose = f"started by rank {holder}'s process", f"rank {holder}'s log"
    else:
        known = [STARTED[row.started] for r in (rank, *shared) if (row := by_rank.get(r)) and row.started in STARTED]
        how, whose = (known[0] if known else "started by the script"), "the run's log"
    names = ", ".join(map(str, shared))
    note = f"rank {rank} shares its output with rank{'s' if len(shared) > 1 else ''} {names} ({how}): showing {whose}"
    return RankLog(path, shared, note)


def _holder(record: RunRecord, rank: int, by_rank: dict[int, RankRow], torchrun: bool) -> int | None:
    """The rank whose log holds ``rank``'s output: the run's log (rank 0's) outside torchrun; under torchrun its
    own, else its parent rank's; None when not known."""
    if not torchrun:
        return 0
    if record.log_path(rank).exists():
        return rank
    row = by_rank.get(rank)
    parent = next((r for r, other in by_rank.items() if row is not None and other.pid == row.ppid), None)
    return parent if parent is not None and record.log_path(parent).exists() else None


def sharing(record: RunRecord, rows: tuple[RankRow, ...]) -> dict[int, tuple[int, ...]]:
    """Log (by its rank number) -> every reported rank whose output it holds, for the logs more than one rank
    writes to: {0: (0, 1)} for a script that spawned two ranks."""
    by_rank = {row.rank: row for row in rows}
    torchrun = record.log_path(None).exists()
    holders: dict[int, list[int]] = {}
    for rank in sorted(by_rank):
        holder = _holder(record, rank, by_rank, torchrun)
        if holder is not None:
            holders.setdefault(holder, []).append(rank)
    return {log: tuple(ranks) for log, ranks in holders.items() if len(ranks) > 1}
