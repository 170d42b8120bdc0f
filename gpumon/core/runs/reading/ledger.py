"""Where a run's wall time went (issue 52): start-up, steps, checkpoint saves, evaluation, stalls, restarts, the end.

Folded as the events arrive and kept in the summary (a few numbers per rank), never from the history again:

- ``startup``: the run's start (its supervisor's) to the first step of its lowest rank;
- ``checkpoint`` and ``eval``: the rank's ``phase`` pauses after its first step (telemetry/phases.py): a save from its
  ``save`` to the phase it went back to; an evaluation from ``eval`` to its next step or ``train`` (a no-grad stretch
  says its ``since`` when it ends);
- ``stall``: the supervisor's stalls, from the last step before one (its ``since``) to the first step after it (one
  going on: until now, or the run's end), less the pauses inside it: a checkpoint save or an evaluation that was
  going on is the pause's, never the stall's too (a no-grad evaluation says nothing until it ends, so a short
  ``stall_after`` calls it a stall first). A stall still open at the run's end keeps the time after its last step
  and pause: the end is 0 then;
- ``restart``: torchrun's restarts, each from its failure until the next attempt was back where it failed
  (attempts.py: ``lost_s``, else ``gap_s``; before the next attempt's first step, until now or the run's end). A
  stall and a restart open at once (the ranks hung, a timeout killed them, torchrun starts them again: the stall
  lasts until the new attempt's first step) share those seconds: the restart wins, the stall keeps what came
  before the failure;
- ``end``: an ended run's time after its last step (or pause), less a restart's;
- ``steps``: the rest, the time the model trained: the data wait and the host's share are inside it (time_split.py).

The parts sum to the wall time (``steps`` is what the others leave). GOODPUT is ``steps`` over the wall, as Google's
goodput work has it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# A stall's event comes a supervisor's pass after its onset, and may come after the step that ended it: each rank
# keeps its latest KEEP_GAPS gaps between steps of GAP_S or more (or with a pause), where such a stall is found.
GAP_S, KEEP_GAPS = 0.5, 8
KEEP_STALLS = 16  # the latest stalls that ended, for their seconds a restart holds (attempts.py keeps 16 attempts)
PARTS = ("startup", "steps", "checkpoint", "eval", "stall", "restart", "end")
PAUSES = {"save": "checkpoint", "eval": "eval"}  # a phase -> the part its time goes to
NAMES = {
    "startup": "start-up",
    "steps": "steps",
    "checkpoint": "checkpoint saves",
    "eval": "evaluation",
    "stall": "stalls",
    "restart": "restarts",
    "end": "the end",
}


@dataclass
class RankTime:
    first_t: float | None = None  # its first step
    mark_t: float = 0.0  # its latest step or pause's end
    open: str | None = None  # the part of a pause going on ("checkpoint", "eval")
    open_t: float = 0.0
    checkpoint: float = 0.0
    eval: float = 0.0
    saves: int = 0  # checkpoint saves seen (after the first step)
    evals: int = 0  # evaluations seen
    last_t: float = 0.0  # its latest event of any kind: an ended run's pause still open ends there
    import_s: float | None = None  # its `import torch` (the ``torch`` event's ``import_s``): start-up no script skips
    step_t: float = 0.0  # its latest step
    paused: float = 0.0  # seconds of its pauses that ended since its latest step (a stall said later holds them)
    gaps: list[list[float]] = field(default_factory=list)  # its latest long gaps: [step, next step, pauses' s]

    def step(self, t: float) -> None:
        if self.first_t is None:
            self.first_t = t
        elif t - self.step_t >= GAP_S or self.paused:  # a stall's event may come after the step that ended it
            self.gaps = [*self.gaps[1 - KEEP_GAPS :], [self.step_t, t, self.paused]]
        self.mark_t, self.step_t, self.paused = max(self.mark_t, t), t, 0.0

    def pause(self, part: str, start: float, t: float) -> float:
        """Count a pause from ``start`` to ``t`` in ``part``; returns its seconds."""
        took = max(0.0, t - start)
        setattr(self, part, getattr(self, part) + took)
        self.paused += took
        self.mark_t = max(self.mark_t, t)
        return took

    def close(self, t: float) -> tuple[float, float] | None:
        """End the pause going on at ``t``: its (start, end), None without one."""
        if self.open is None:
            return None
        self.pause(self.open, self.open_t, t)
        self.open = None
        return self.open_t, t


@dataclass
class Ledger:
    ranks: dict[int, RankTime] = field(default_factory=dict)
    stall_s: float = 0.0  # the stalls that ended, less the pauses inside them
    stall_since: float | None = None  # a stall going on: from its last step
    stall_paused: float = 0.0  # seconds of the lowest rank's pauses inside the stall going on
    stalls: list[list[float]] = field(default_factory=list)  # the latest ended: [since, end, seconds counted]

    def fold(self, kind: str, event: dict[str, Any], rank: int) -> None:
        t = event.get("t")
        if not isinstance(t, int | float):
            return
        if (seen := self.ranks.get(rank)) is not None and str(event.get("src", "")).startswith("rank"):
            seen.last_t = max(seen.last_t, float(t))  # its own word (the supervisor's events name ranks too)
        if kind == "stall":
            since = event.get("since")
            self._stall(float(since) if isinstance(since, int | float) else float(t))
        elif kind == "stall_end" and self.stall_since is not None:  # no step ended it here: the supervisor's word
            lasted = event.get("lasted_s")
            self._stall_ended(self.stall_since + (float(lasted) if isinstance(lasted, int | float) else 0.0))
        elif kind == "step":
            stepped = self.ranks.setdefault(rank, RankTime())
            self._inside_stall(rank, stepped.close(t))
            stepped.step(float(t))
            if self.stall_since is not None and t > self.stall_since:
                self._stall_ended(float(t))  # the first step after it (stall_end's lasted_s runs to a later one)
        elif kind == "torch" and isinstance(took := event.get("import_s"), int | float):
            own = self.ranks.setdefault(rank, RankTime())
            own.import_s = float(took) if own.import_s is None else own.import_s
        elif kind == "proc_start" and rank in self.ranks:
            self.ranks[rank].open = None  # a new process of the rank (a restart): a pause of the old one ended with it
        elif kind == "phase" and (r := self.ranks.get(rank)) is not None and r.first_t is not None:
            self._inside_stall(rank, r.close(t))
            phase, since = event.get("phase"), event.get("since")
            if phase == "eval" and isinstance(since, int | float):  # a no-grad stretch that just ended
                start = max(float(since), r.mark_t)
                r.pause("eval", start, t)
                self._inside_stall(rank, (start, float(t)))
                r.evals += 1
            elif phase in PAUSES:
                r.open, r.open_t = PAUSES[str(phase)], float(t)
                if not event.get("after"):  # not the phase a save went back to
                    r.saves, r.evals = r.saves + (phase == "save"), r.evals + (phase == "eval")

    def lowest(self) -> RankTime | None:
        """The rank whose pauses the ledger counts: the lowest that stepped (None: no rank stepped yet)."""
        stepped = [rank for rank, r in self.ranks.items() if r.first_t is not None]
        return self.ranks[min(stepped)] if stepped else None

    def _stall(self, since: float) -> None:
        """A stall from ``since`` (a rank's last step): already over where a rank stepped after it, else open."""
        for r in self.ranks.values():
            for start, end, paused in r.gaps:
                if abs(start - since) < 1e-3:
                    self._count(start, end, max(0.0, end - start - paused))  # its stall_end then adds nothing
                    return
        self.stall_since = since
        low = self.lowest()  # its pauses since its last step, which ended before the stall was said
        self.stall_paused = low.paused if low is not None and low.step_t >= since else 0.0

    def _inside_stall(self, rank: int, pause: tuple[float, float] | None) -> None:
        """A pause of ``rank`` that ended: its seconds inside the stall going on are the pause's, not the stall's."""
        if pause is not None and self.stall_since is not None and self.ranks.get(rank) is self.lowest():
            self.stall_paused += max(0.0, pause[1] - max(pause[0], self.stall_since))

    def _stall_ended(self, at: float) -> None:
        if self.stall_since is not None:
            self._count(self.stall_since, at, max(0.0, at - self.stall_since - self.stall_paused))
        self.stall_since, self.stall_paused = None, 0.0

    def _count(self, since: float, end: float, took: float) -> None:
        self.stall_s += took
        self.stalls = [*self.stalls[1 - KEEP_STALLS :], [since, end, took]]

    def seconds(self, started: float | None, until: float, ended: bool, restarts: list[Any]) -> dict[str, float]:
        """Each part's seconds and the ``wall``, from ``started`` to ``until`` (the run's end, or now); {} without a
        start."""
        if started is None:
            return {}
        wall = max(0.0, until - started)
        out = dict.fromkeys(PARTS, 0.0)
        r = self.lowest()
        if r is None:
            out["startup"] = wall
            return {**out, "wall": wall}
        if r.first_t is None or not started - 60 <= r.first_t <= until + 1:
            return {}  # its steps are not within the run's start and end (events written by hand, a skewed clock)
        out["startup"] = max(0.0, (r.first_t or started) - started)
        # `import torch` (seconds on a loaded host): in start-up, though not the script's own work
        imports = min(out["startup"], max(0.0, r.import_s)) if r.import_s is not None else None
        out["checkpoint"], out["eval"] = r.checkpoint, r.eval
        # An ended run's pause still open (a model left in eval mode after its last step) lasted until the rank's
        # last word (its final report, its metrics); what came after is the end (a framework's teardown), not it.
        paused_until = until if not ended else min(until, max(r.last_t, r.open_t))
        if r.open is not None:
            out[r.open] += max(0.0, paused_until - r.open_t)
        lost = restart_windows(restarts, until)
        out["restart"] = sum(b - a for a, b in lost)
        # a restart's seconds are its own, never a stall's too (the stall's are those outside the restarts)
        out["stall"] = self.stall_s - sum(min(took, overlap(a, b, lost)) for a, b, took in self.stalls)
        if (since := self.stall_since) is not None:  # going on: less the pauses inside it, the open one's too
            inside = self.stall_paused + (max(0.0, paused_until - max(r.open_t, since)) if r.open else 0.0)
            out["stall"] += max(0.0, until - since - inside - overlap(since, until, lost))
        if ended and self.stall_since is None:
            after = max(r.mark_t, paused_until) if r.open is not None else r.mark_t
            out["end"] = max(0.0, until - after - overlap(after, until, lost))
        out["steps"] = max(0.0, wall - sum(v for k, v in out.items() if k != "steps"))
        extra = {"wall": wall, "saves": r.saves, "evals": r.evals}
        if imports is not None:
            extra["imports"] = imports
        return {k: round(v, 3) for k, v in {**out, **extra}.items()}

    def to_state(self) -> dict[str, Any]:
        return {
            "ranks": {str(rank): asdict(r) for rank, r in self.ranks.items()},
            "stall_s": self.stall_s,
            "stall_since": self.stall_since,
            "stall_paused": self.stall_paused,
            "stalls": self.stalls,
        }

    @classmethod
    def from_state(cls, state: Any) -> Ledger:
        found = cls()
        if not isinstance(state, dict):
            return found
        for rank, item in (state.get("ranks") or {}).items():
            try:
                found.ranks[int(rank)] = RankTime(**item)
            except (TypeError, ValueError):
                continue  # a field this version does not know: that rank is left out, never the summary
        found.stall_s = float(state.get("stall_s") or 0.0)
        since = state.get("stall_since")
        found.stall_since = float(since) if isinstance(since, int | float) else None
        found.stall_paused = float(state.get("stall_paused") or 0.0)
        kept = state.get("stalls") or []
        if isinstance(kept, list):
            ok = [i for i in kept if isinstance(i, list) and len(i) == 3 and all(isinstance(x, int | float) for x in i)]
            found.stalls = [[float(x) for x in item] for item in ok]
        return found


def restart_windows(restarts: list[Any], until: float) -> list[tuple[float, float]]:
    """Each restart's (failure, back where it failed) within ``until``: ``lost_s``, else ``gap_s``, else (no step of
    the next attempt yet) until ``until``."""
    out = []
    for x in restarts:
        took = x.lost_s if x.lost_s is not None else x.gap_s
        start = float(x.failed_t)
        out.append((start, max(start, min(until, start + took if took is not None else until))))
    return out


def overlap(start: float, end: float, windows: list[tuple[float, float]]) -> float:
    """Seconds of ``start``..``end`` inside the ``windows`` (which do not overlap: one attempt fails at a time)."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in windows)


def goodput(ledger: dict[str, float]) -> float | None:
    """The share of the wall time spent in steps (0-1); None before the ledger has any time."""
    wall = ledger.get("wall") or 0.0
    return min(1.0, ledger.get("steps", 0.0) / wall) if wall > 0 else None


def goodput_words(ledger: dict[str, float], large: float = 0.2) -> str:
    """ "GOODPUT 41% (start-up 37%, checkpoint saves 22%)": the parts other than steps that take ``large`` or more,
    largest first; "" before the ledger has any time."""
    share = goodput(ledger)
    if share is None:
        return ""
    wall = ledger["wall"]
    parts = sorted(((ledger.get(k, 0.0) / wall, k) for k in PARTS if k != "steps"), reverse=True)
    big = ", ".join(f"{NAMES[k]} {s:.0%}" for s, k in parts if s >= large)
    return f"GOODPUT {share:.0%}" + (f" ({big})" if big else "")


def ledger_line(ledger: dict[str, float]) -> str:
    """ "GOODPUT 41% of 3m05s: steps 76.0 s, start-up 68.5 s, checkpoint saves 33.3 s (3), evaluation 7.4 s (2)" (the
    parts with time, largest first after the steps)."""
    from gpumon.core.format import duration

    share = goodput(ledger)
    if share is None:
        return ""
    counts = {"checkpoint": ledger.get("saves"), "eval": ledger.get("evals")}
    parts = [("steps", ledger.get("steps", 0.0))]
    parts += sorted(((k, ledger.get(k, 0.0)) for k in PARTS if k != "steps"), key=lambda p: -p[1])
    words = [f"{NAMES[k]} {v:.1f} s" + (f" ({counts[k]:.0f})" if counts.get(k) else "") for k, v in parts if v >= 0.05]
    return f"GOODPUT {share:.0%} of {duration(ledger['wall'])}: " + ", ".join(words)
