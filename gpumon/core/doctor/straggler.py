"""The slow rank of a lock-step run, in words: "rank 2 is the straggler: 40 ms a step more of its own work; ranks 0,
1 and 3 wait for it in every all-reduce", the likely cause where gpumon sees one, and the fix.

The scores are core/runs/reading/lanes.py's (the fastest rank's own work over this rank's). A rank is the
straggler once its score has stayed below ``FLAG`` for ``[runs] straggler_after`` seconds (60 by default): a slow
batch or a checkpoint on one rank is no straggler. Its likely cause, from what gpumon measures in the rank: its
DataLoader wait (more than the others', covering at least half its surplus), else its GPU where the supervisor
saw it busier or idler than its peers'. A host whose ranks run more threads than it has CPUs is its own finding
(slow.py "oversubscribed"): on a small machine both are true, and both are said, the larger cost first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumon.core.doctor.advice_types import Advice
from gpumon.core.runs.reading.lanes import FLAG, Lane, ms

AFTER_S = 60.0  # seconds below FLAG before a rank is named (the "for a minute")


def straggler_after(path: Path | None = None) -> tuple[float, str | None]:
    """``[runs] straggler_after`` (seconds), and what is wrong with it; a mistake keeps the default."""
    from gpumon.core.config import ConfigError, config_section

    try:
        raw = config_section("runs", path).get("straggler_after")
    except ConfigError as err:
        return AFTER_S, str(err)
    if raw is None:
        return AFTER_S, None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < 0:
        return AFTER_S, f"[runs] straggler_after = {raw!r} must be a number of seconds >= 0"
    return float(raw), None


@dataclass(frozen=True)
class Straggler:
    lane: Lane
    lanes: tuple[Lane, ...]
    surplus_s: float  # its own work a step beyond the fastest rank's
    waiting: tuple[int, ...]  # the ranks that wait for it (their wait covers at least half its surplus)
    cause: str  # "data", "compute", "cpu_share", "gpu" or ""
    cause_text: str  # "likely cause: its data wait, 41 ms a step against 0 ms on the others"

    @property
    def rank(self) -> int:
        return self.lane.rank

    @property
    def cost(self) -> float:
        """The share of every rank's step spent waiting for it."""
        return min(1.0, self.surplus_s / self.lane.step_s) if self.lane.step_s > 0 else 0.0

    def text(self) -> str:
        others = _ranks_words(self.waiting) if self.waiting else "the others"
        verb = "waits" if len(self.waiting) == 1 else "wait"
        coll = max((lane.coll_s for lane in self.lanes if lane.rank in self.waiting), default=0.0)
        wait = max((lane.wait_s for lane in self.lanes if lane.rank in self.waiting), default=0.0)
        inside = "in every all-reduce" if coll < wait / 2 else "in its collectives"  # DDP's backward, else the script's
        text = (
            f"rank {self.rank} is the straggler: {ms(self.surplus_s)} a step more of its own work; "
            f"{others} {verb} for it {inside} (score {self.lane.score:.2f})"
        )
        return f"{text}; {self.cause_text}" if self.cause_text else text


def find_straggler(telemetry: Any, after: float | None = None) -> Straggler | None:
    """The rank slow for ``after`` seconds (the config's when None), the slowest of them; None: no straggler."""
    lanes: tuple[Lane, ...] = telemetry.lanes.lanes()
    low = [lane for lane in lanes if lane.score < FLAG]
    if not low:
        return None  # the usual case: the config (half a millisecond to read) is not read
    if after is None:
        after = straggler_after()[0]
    slow = [lane for lane in low if telemetry.lanes.low_for(lane.rank) >= after]
    if not slow:
        return None
    lane = min(slow, key=lambda found: found.score)
    surplus = lane.own_s - min(other.own_s for other in lanes)
    waiting = tuple(other.rank for other in lanes if other.rank != lane.rank and other.wait_s >= surplus / 2)
    cause, words = _cause(telemetry, lane, lanes, surplus)
    return Straggler(lane, lanes, surplus, waiting, cause, words)


def _cause(telemetry: Any, lane: Lane, lanes: tuple[Lane, ...], surplus: float) -> tuple[str, str]:
    others = [other for other in lanes if other.rank != lane.rank]
    data = [other.data_s for other in others if other.data_s is not None]
    if lane.data_s is not None and data and lane.data_s - min(data) >= surplus / 2:
        feed = telemetry.feeding.ranks.get(lane.rank)
        loader = (feed.loader if feed is not None else None) or {}
        settings = ", ".join(f"{k}={loader[k]}" for k in ("num_workers", "batch_size") if k in loader)
        where = f"; its dataset's __getitem__ at {loader['getitem']}" if loader.get("getitem") else ""
        return "data", (
            f"likely cause: its data wait, {ms(lane.data_s)} a step against {ms(min(data))} on the others"
            + (f" (DataLoader {settings})" if settings else "")
            + where
        )
    shares = [share for other in others if (share := _cpu_share(other)) is not None]
    mine = _cpu_share(lane)
    if mine is not None and shares and lane.cpu_s is not None:
        # what the host gives a rank's work of a CPU (oversubscribed: less): the yardstick for both rules below
        usual = sorted(shares)[len(shares) // 2]
        cpus = min(other.cpu_s for other in others if other.cpu_s is not None)
        if lane.cpu_s - cpus >= 0.5 * usual * surplus:  # its surplus is spent computing, at the host's usual share
            return "compute", (
                f"likely cause: it computes more: its process used {ms(lane.cpu_s)} of CPU a step against "
                f"{ms(cpus)} on the others (a larger batch or shard, or work only it does)"
            )
        if mine < 0.5 * usual:  # it got a CPU far less of its working time than the others did
            return "cpu_share", (
                f"likely cause: its own work ran on a CPU only {mine:.0%} of its time (the others: {usual:.0%}): it "
                "waits for a core (other processes on its CPUs) or for I/O outside the DataLoader"
            )
    gpus = {rank: feed.gpu for rank, feed in telemetry.feeding.ranks.items() if feed.gpu is not None}
    own = gpus.get(lane.rank)
    peers = [gpus[other.rank][1] for other in others if other.rank in gpus]
    if own is not None and peers and own[1] - max(peers) >= 20:  # its GPU works longer for the same step
        return "gpu", (
            f"likely cause: its GPU {own[0]} is {own[1]:.0f}% busy against {max(peers):.0f}% on the others' "
            "(a slower or throttled GPU: its clocks or temperature)"
        )
    return "", ""


def _cpu_share(lane: Lane) -> float | None:
    """The share of its own work outside the DataLoader that the rank's process ran on a CPU (at most 1)."""
    working = lane.own_s - (lane.data_s or 0.0)
    return min(1.0, lane.cpu_s / working) if lane.cpu_s is not None and working > 0 else None


# A cause gpumon saw -> (the advice's key, its title for rank {rank}, the change)
_FIXES = {
    "compute": (
        "straggler_compute",
        "give rank {rank} the same work as the others",
        "split the data evenly (DistributedSampler, drop_last=True; equal sequence lengths per rank, e.g. "
        "bucketing), and move logging, evaluation or checkpoint work off the hot loop or spread it over ranks",
    ),
    "cpu_share": (
        "straggler_cpu",
        "give rank {rank} a CPU of its own",
        "look for other processes on its CPUs (top, gpumon's GPU view) and pin the ranks apart "
        "(taskset, numactl, or fewer ranks or threads per host: OMP_NUM_THREADS)",
    ),
    "gpu": (
        "straggler_gpu",
        "check rank {rank}'s GPU",
        "nvidia-smi -q -d CLOCK,TEMPERATURE,PERFORMANCE on that GPU (clocks held down: power or thermal "
        "throttling); move the run off it, or give it cooling",
    ),
}


def straggler_advice(found: Straggler, run_id: str) -> list[Advice]:
    """The fix for the cause gpumon saw, else what to look at (a data cause gets the DataLoader's fixes, slow.py)."""
    if found.cause in _FIXES:
        key, title, change = _FIXES[found.cause]
        return [Advice(key, title.format(rank=found.rank), found.cause_text.removeprefix("likely cause: "), change)]
    return [
        Advice(
            "straggler",
            f"find what rank {found.rank} does more than the others",
            f"its own work takes {ms(found.surplus_s)} a step more than the fastest rank's, and every rank waits "
            "for it; its data wait, CPU time and GPU look like the others'",
            f"compare its shard of the data and its batch shapes with the others'; look for another process on its "
            f"CPUs or GPU (gpumon's GPU view, top); gpumon doctor {run_id} again once fixed",
        )
    ]


def _ranks_words(ranks: tuple[int, ...]) -> str:
    """ "rank 1", "ranks 0 and 1", "ranks 0, 1 and 3" """
    names = [str(r) for r in ranks]
    if len(names) == 1:
        return f"rank {names[0]}"
    return f"ranks {', '.join(names[:-1])} and {names[-1]}"


def slow_lines(slow: Any, lanes: Any) -> list[str]:
    """The doctor's section where a straggler is named: every slow finding, the larger cost first (a straggler on
    an oversubscribed host: both), then each rank's own work and wait a step. [] without a straggler."""
    if not any(found.kind == "straggler" for found in slow):
        return []
    lines = [found.text for found in slow]
    for lane in lanes:
        own, wait = ms(lane["own_s"]), ms(lane["wait_s"])
        lines.append(f"rank {lane['rank']}: own work {own} a step, waits {wait}, score {lane['score']:.2f}")
    return lines
