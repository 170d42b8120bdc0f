"""Stalls: a run whose ranks stop stepping for much longer than their usual step (the supervisor's watch).

The rule, per rank, from the second step on (the first has no usual step yet, and holds start-up costs):
the rank is overdue when its last step is older than the larger of ``stall_after`` (120 s) and
``stall_steps`` (20) times its median step (``progress.py``'s window); in a known pause (its model
switched to eval mode, inside ``torch.save``, or exiting, after its last step: ``telemetry/phases.py``) the larger
of that and ``stall_pause_after`` (1800 s); one rank's pause counts for all (the others wait for rank 0's
evaluation or checkpoint in their next collective). A rank past its plan's last step, or whose process is gone, is
not judged. A rank whose process is stopped (SIGSTOP, state T) for ``STOPPED_S`` is stalled at once.

At a stall's onset the supervisor takes every rank's stack (``stacks.py``), writes a ``stall`` event, marks
``status.json`` (``state: stalled``, ``stall``) and raises one ``stalled`` alert. When stepping resumes it
writes ``stall_end`` with how long the stall lasted and goes back to ``running``. ``[runs]`` in config.toml
sets the numbers; ``GPUMON_STALL_AFTER`` (seconds) overrides ``stall_after`` (tests, a quick check).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Protocol

import psutil

from gpumon.core.alerts.text import clip
from gpumon.core.doctor import hang, stuck
from gpumon.core.doctor.stall_text import stall_advice
from gpumon.core.events import EventWriter
from gpumon.core.format import duration
from gpumon.core.protocol import STACKS_DIR
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.store import process_alive
from gpumon.core.runs.supervision.alerts import fix_words
from gpumon.core.runs.supervision.stacks import capture, proc_state

STALL_AFTER_S = 120.0
STALL_STEPS = 20.0
PAUSE_AFTER_S = 1800.0
STOPPED_S = 4.0  # a rank stopped this long is a stall (a debugger's brief stop or ctrl-Z then bg is not)
AFTER_ENV = "GPUMON_STALL_AFTER"
PAUSES = ("eval", "save", "exit")


@dataclass(frozen=True)
class StallRule:
    after_s: float = STALL_AFTER_S
    steps: float = STALL_STEPS
    pause_s: float = PAUSE_AFTER_S

    def window(self, step_s: float | None, paused: bool) -> float:
        """How long a rank may go without a step."""
        limit = max(self.after_s, self.steps * (step_s or 0.0))
        return max(limit, self.pause_s) if paused else limit

    def describe(self) -> str:
        return (
            f"no step for the larger of {duration(self.after_s)} and {self.steps:g} x the median step "
            f"({duration(self.pause_s)} in an eval or a checkpoint save)"
        )


def load_rule(path: Path | None = None) -> tuple[StallRule, str | None]:
    """The rule from ``[runs]`` (and ``GPUMON_STALL_AFTER``); a mistake there keeps the defaults and says so."""
    from gpumon.core.config import ConfigError, config_section

    values = {"stall_after": STALL_AFTER_S, "stall_steps": STALL_STEPS, "stall_pause_after": PAUSE_AFTER_S}
    problem = None
    try:
        table = config_section("runs", path)
    except ConfigError as err:
        table, problem = {}, str(err)
    for key in values:
        raw = table.get(key)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int | float) or raw <= 0:
            unit = "steps" if key == "stall_steps" else "seconds"
            problem = f"[runs] {key} = {raw!r} must be a positive number of {unit}"
            continue
        values[key] = float(raw)
    env = os.environ.get(AFTER_ENV)
    if env:
        try:
            values["stall_after"] = max(0.5, float(env))
        except ValueError:
            problem = f"{AFTER_ENV} must be a number of seconds, not {env!r}"
    return StallRule(values["stall_after"], values["stall_steps"], values["stall_pause_after"]), problem


class Owner(Protocol):
    """What the watch needs of the supervisor."""

    run_dir: Path
    fold: RunTelemetry
    events: EventWriter
    status: dict[str, Any]
    known: dict[int, float]  # the run's processes: pid -> start time

    def save(self, **fields: Any) -> bool: ...
    def alert(self, text: str, kind: str, **fields: Any) -> None: ...


class StallWatch:
    def __init__(self) -> None:
        self.rule, problem = load_rule()
        self.problem = problem  # said once, as a note, at the first check
        self.seen: dict[int, int] = {}  # rank -> its latest step
        self.advanced: dict[int, float] = {}  # rank -> when that step was first seen
        self.stopped: dict[int, float] = {}  # pid -> since when it is seen stopped
        self.since: float | None = None  # the stall's start (the last step before it), while stalled
        self.seq = 0

    def check(self, owner: Owner, now: float | None = None) -> None:
        """Once per summary pass, after the fold took the new events. Never raises: the run goes on."""
        try:
            self._check(owner, time.time() if now is None else now)
        except (OSError, psutil.Error, ValueError, KeyError, TypeError) as err:
            with contextlib.suppress(OSError):
                owner.events.write("note", text=f"the stall watch failed: {err!r}")

    def _check(self, owner: Owner, now: float) -> None:
        if owner.status.get("state") == "stopping":
            return  # asked to stop: its ranks stop stepping because of it
        if self.problem:
            owner.events.write("note", text=f"stall rule: {self.problem}; using the defaults")
            self.problem = None
        moved = self._take_steps(owner, now)
        pids, ended = _rank_pids(owner.fold, owner.known)
        overdue = self._overdue(owner.fold, pids, now)
        halted = self._halted(pids, now)
        if self.since is None and (overdue or halted):
            self._onset(owner, pids, ended, overdue, halted, now)
        elif self.since is not None and moved and not halted:
            self._end(owner, now)

    def settle(self, owner: Owner) -> None:
        """At the run's end, after the last fold: a stall that stepping ended between two passes ends too."""
        now = time.time()
        try:
            if self.since is not None and self._take_steps(owner, now):
                self._end(owner, now)
        except (OSError, ValueError, KeyError, TypeError) as err:
            with contextlib.suppress(OSError):
                owner.events.write("note", text=f"the stall watch failed: {err!r}")

    def _take_steps(self, owner: Owner, now: float) -> bool:
        """Record each rank's latest step; True when one moved since the last pass."""
        progress, moved = owner.fold.progress, False
        for rank, step in progress.steps.items():
            if self.seen.get(rank) != step:
                moved = moved or rank in self.seen
                # the step's own time (the rank's clock, this host's), not this pass's: 2 s closer
                self.seen[rank], self.advanced[rank] = step, min(now, progress.stamps.get(rank, now))
        return moved

    def _overdue(self, fold: RunTelemetry, pids: dict[int, int], now: float) -> dict[int, float]:
        """rank -> its window, for the ranks past it. A pause of one rank pauses them all: while rank 0 alone
        evaluates or saves a checkpoint, the others wait for it in their next collective."""
        progress, out = fold.progress, {}
        paused = any(  # a phase before the rank's latest step is over; an exit has no step after it
            phase in PAUSES and (at == progress.steps.get(rank) or phase == "exit")
            for rank, (phase, at) in progress.phases.items()
        )
        for rank, dts in progress.dts.items():
            step, plan = progress.steps.get(rank), progress.plan.get(rank)
            if not dts or step is None or (plan and step >= plan) or rank not in self.advanced:
                continue
            pid = pids.get(rank)
            if pid is None or proc_state(pid) == "gone":
                continue
            window = self.rule.window(median(dts), paused)
            if now - self.advanced[rank] > window:
                out[rank] = window
        return out

    def _halted(self, pids: dict[int, int], now: float) -> list[int]:
        """The ranks whose process has been stopped (SIGSTOP) for STOPPED_S."""
        out = []
        for rank, pid in pids.items():
            if proc_state(pid) != "stopped":
                self.stopped.pop(pid, None)
                continue
            if now - self.stopped.setdefault(pid, now) >= STOPPED_S:
                out.append(rank)
        return out

    def _onset(
        self,
        owner: Owner,
        pids: dict[int, int],
        ended: dict[int, int],
        overdue: dict[int, float],
        halted: list[int],
        now: float,
    ) -> None:
        self.seq += 1
        ranks = list(overdue) or halted
        self.since = min(self.advanced.get(r, now) for r in ranks)
        places = capture(owner.run_dir, {pid: rank for rank, pid in pids.items()}, self.seq, len(pids) + len(ended))
        places = sorted(places + [hang.gone(rank, pid) for rank, pid in ended.items()], key=lambda p: p.rank)
        kind, head = hang.verdict(places)
        where = hang.lines(places)
        step = owner.fold.progress.step
        window = max(overdue.values(), default=None)
        usual = [median(d) for d in owner.fold.progress.dts.values() if d]
        stall = {
            "since": self.since,
            "step": step,
            "ranks": sorted(ranks),
            "window_s": window,
            "step_s": min(usual) if usual else None,
            "rule": self.rule.describe(),
            "verdict": kind,
            "headline": head,
            "where": where,
            "blame": hang.blamed(places),  # the ranks the others wait for
            "stacks": f"stacks/stall-{self.seq}.txt",
            "seq": self.seq,
            **stuck.judge(owner.run_dir, {pid: rank for rank, pid in {**ended, **pids}.items()}, _waits(places)),
        }
        odd = stall.get("collective")
        if odd:  # each rank's last collective names the collective and the odd rank out: that is the headline
            stall.update(headline=odd["headline"], blame=odd["ranks"])
        owner.events.write("stall", **stall)
        fields: dict[str, Any] = {"stall": stall}
        if owner.status.get("state") == "running":
            fields["state"] = "stalled"
        owner.save(**fields)
        idle = f"no step for {duration(now - self.since)}" if overdue else "a rank is stopped"
        at = f" at step {step}" if step is not None else ""
        fix = stall_advice(stall)  # the doctor's first fix joins the alert whole
        said = clip(f"stalled{at}: {idle}; {odd['alert'] if odd else head or '; '.join(where)}", 400)  # at a word
        owner.alert(said, "stalled", **({"fix": fix_words(fix[0])} if fix else {}))

    def _end(self, owner: Owner, now: float) -> None:
        since, self.since = self.since or now, None
        lasted = max(0.0, max(self.advanced.values(), default=now) - since)  # to the latest step seen
        step = owner.fold.progress.step
        owner.events.write("stall_end", since=since, lasted_s=round(lasted, 1), step=step, seq=self.seq)
        owner.events.write("note", text=f"the stall ended: stepping resumed at step {step} after {duration(lasted)}")
        last = {**(owner.status.get("stall") or {}), "ended": now, "lasted_s": round(lasted, 1)}
        fields: dict[str, Any] = {"stall": None, "last_stall": last}
        if owner.status.get("state") == "stalled":
            fields["state"] = "running"
        owner.save(**fields)


def _waits(places: list[hang.RankWhere]) -> dict[int, str]:
    """rank -> "waits in next_batch at data.py:88 (time.sleep)", for the ranks whose stack came back."""
    return {p.rank: p.text.removeprefix(f"rank {p.rank} ") for p in places if p.status == "waits" and p.text}


def _rank_pids(fold: RunTelemetry, known: dict[int, float]) -> tuple[dict[int, int], dict[int, int]]:
    """(rank -> its live process, rank -> its ended one when no process of it lives). Only the run's own
    processes, by pid and start time: a pid reused by another program is never signalled."""
    live: dict[int, int] = {}
    ended: dict[int, int] = {}
    for pid, rank in sorted(fold.pids.items()):
        if pid in known and process_alive(pid, known[pid]):
            live[rank] = pid
        elif pid in known:
            ended[rank] = pid
    return live, {rank: pid for rank, pid in ended.items() if rank not in live}


def tidy(run_dir: Path) -> None:
    """At the run's end: the stack files that never got a dump (most of them) go; the dumps stay."""
    for path in (run_dir / STACKS_DIR).glob("*.txt"):
        with contextlib.suppress(OSError):
            if path.stat().st_size == 0:
                path.unlink()
