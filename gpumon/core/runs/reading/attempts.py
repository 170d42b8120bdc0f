"""A run's attempts under torchrun's ``--max-restarts``: which rank failed, with what and when, and what it cost.

torchrun starts every rank again after a failure and sets ``TORCHELASTIC_RESTART_COUNT`` in each attempt; each
rank writes it as ``restart`` in its ``proc_start`` (a new events file per process), so every later event of that
pid belongs to that attempt. Folded as the events arrive, kept in the summary (a few numbers per attempt).

What an attempt cost: the time from its failure to the next attempt's first step, and, where the script says its
position (a tqdm bar, HF's or Lightning's global step: ``total`` and ``plan`` events' ``done``), the steps redone
(the failed attempt's last position less where the next one began: its first report less the optimizer steps it
had taken, once the position is seen to move one for one with them) and the time until the next attempt is back where
the failure was. Where no position is said, gpumon cannot tell whether the script resumed from a checkpoint:
the steps redone are unknown (``None``), never guessed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PACED = 512  # (t, step) points kept per attempt
WAITING = 8  # worker_exit events held until their pid's proc_start is folded (a rank that died at its start)
KEEP = 16  # attempts kept in a summary (the newest): torchrun's restarts are few; a flapping job keeps its last


@dataclass
class Attempt:
    number: int  # 0 for the first (torchrun's restart count)
    started: float  # the first proc_start of it
    first_step_t: float | None = None
    last_step_t: float | None = None
    steps: int = 0  # the most optimizer steps a rank took in it
    # Where the job's position stood at this attempt's step 0: each report's done less the optimizer steps taken
    # then (a bar's display lags its count by up to a refresh: the highest is the nearest). Trusted only once two
    # reports 10+ steps apart agree (the position moves one for one with the steps, not in micro-batches).
    start_lo: int | None = None
    start_hi: int | None = None
    span: tuple[int, int] | None = None  # the steps of its first and latest report
    done_rank: int | None = None  # the lowest rank that says its position: the one read (ranks differ by a step)
    paced: list[tuple[float, int]] = field(default_factory=list)  # (t, step) about once a second, bounded
    failure: dict[str, Any] | None = None  # the first exception in it: rank, exc_type, message, where, t
    ranks: list[int] = field(default_factory=list)  # the ranks that started in it
    exited: list[int] = field(default_factory=list)  # the ranks that reached their exit (phase "exit")
    raised: list[int] = field(default_factory=list)  # the ranks that raised
    exit: dict[str, Any] | None = None  # torchrun's first failed worker: rank, exitcode, signal, t (worker_exit)
    last_t: float = 0.0  # its latest event

    @property
    def start(self) -> int | None:
        """Where the job's position stood at this attempt's step 0, in its own unit; None until known."""
        if self.start_lo is None or self.start_hi is None or self.span is None:
            return None
        apart = self.span[1] - self.span[0]
        return self.start_hi if apart >= 10 and self.start_hi - self.start_lo <= max(2, apart // 5) else None

    def step_at(self, step: int) -> float | None:
        """When it had taken ``step``: between its points a second apart, at its pace there (the later point alone
        put a second of steps in a restart's time lost); None before it did."""
        if step <= 0:
            return self.first_step_t
        points = list(self.paced)
        if self.last_step_t is not None and (not points or self.steps > points[-1][1]):
            points.append((self.last_step_t, self.steps))  # past the last point: its latest step closes the span
        after = next((i for i, (_, s) in enumerate(points) if s >= step), None)
        if after is None:
            return None
        t1, s1 = points[after]
        if after == 0 or s1 == step:
            return t1
        t0, s0 = points[after - 1]
        return t0 + (t1 - t0) * (step - s0) / (s1 - s0)


@dataclass(frozen=True)
class Restart:
    """One failed attempt and what the next one cost (all in the attempt's terms; None: not known)."""

    attempt: int  # the failed attempt's number, from 1
    failed_t: float  # its failure (the exception), else its last event
    rank: int | None  # the rank that failed first
    what: str  # "raised RuntimeError: corrupt record in shard 7", or "ended without an exception ..."
    where: str  # "shard.py:20 in <module>", "" where no traceback says
    steps: int  # optimizer steps its ranks took
    gap_s: float | None  # from the failure to the next attempt's first step (None: no step yet)
    redone: int | None  # steps the next attempt did again (position known), else None
    lost_s: float | None  # from the failure until the next attempt was back at the failed position
    lost_so_far: bool  # the next attempt has not got back there yet: lost_s is up to its latest step

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Attempts:
    attempts: dict[int, Attempt] = field(default_factory=dict)
    pids: dict[int, int] = field(default_factory=dict)  # pid -> attempt number (its later events are of it)
    rank_of: dict[int, int] = field(default_factory=dict)  # pid -> its rank (a worker_exit names a pid)
    waiting: list[dict[str, Any]] = field(default_factory=list)  # worker_exit events whose pid is not known yet

    def fold(self, kind: str, event: dict[str, Any], rank: int) -> None:
        t = event.get("t")
        pid = event.get("pid")
        if not isinstance(t, int | float) or type(pid) is not int:
            return
        if kind == "worker_exit":  # the supervisor's: its pid is its own, the worker's is worker_pid
            self._exit(event)
            return
        if kind == "proc_start":
            self.rank_of[pid] = rank
            number = event.get("restart")
            number = number if type(number) is int and number >= 0 else 0
            self.pids[pid] = number
            attempt = self.attempts.get(number)
            if attempt is None:
                attempt = self.attempts[number] = Attempt(number, float(t))
                self._trim()
            if rank not in attempt.ranks:
                attempt.ranks.append(rank)
            if any(e.get("worker_pid") == pid for e in self.waiting):
                for held in [e for e in self.waiting if e.get("worker_pid") == pid]:
                    self.waiting.remove(held)
                    self._exit(held)
        number = self.pids.get(pid)
        attempt = self.attempts.get(number) if number is not None else None
        if attempt is None:
            return
        attempt.last_t = max(attempt.last_t, float(t))
        if kind == "step" and type(event.get("step")) is int:
            attempt.steps = max(attempt.steps, event["step"])
            attempt.first_step_t = attempt.first_step_t or float(t)
            attempt.last_step_t = float(t)
            if not attempt.paced or t - attempt.paced[-1][0] >= 1.0:
                attempt.paced.append((float(t), event["step"]))
                if len(attempt.paced) > PACED:
                    del attempt.paced[1::2]  # every other point: a week-long attempt keeps PACED points
        elif kind in ("total", "plan") and type(done := event.get("done")) is int and type(event.get("step")) is int:
            if attempt.done_rank is not None and rank > attempt.done_rank:
                return
            step = event["step"]  # the optimizer steps this process had taken (written since issue 48)
            if attempt.done_rank is None or rank < attempt.done_rank:
                attempt.done_rank, attempt.start_lo, attempt.start_hi, attempt.span = rank, None, None, None
            start = done - step
            attempt.start_lo = start if attempt.start_lo is None else min(attempt.start_lo, start)
            attempt.start_hi = start if attempt.start_hi is None else max(attempt.start_hi, start)
            attempt.span = (attempt.span[0] if attempt.span else step, step)
        elif kind == "exception":
            from gpumon.core.doctor.ended import peer_lost, user_frame

            if rank not in attempt.raised:
                attempt.raised.append(rank)
            message = str(event.get("message") or "")
            if attempt.failure is not None and (peer_lost(attempt.failure["message"]) <= peer_lost(message)):
                return  # the first root cause stands; a lost peer (a symptom) gives way to one
            trace = str(event.get("traceback") or "")
            attempt.failure = {
                "rank": rank,
                "exc_type": str(event.get("exc_type") or "Exception"),
                "message": message[:300],
                "where": user_frame(trace)[0] if trace else "",
                "t": float(t),
            }
        elif kind == "phase" and event.get("phase") == "exit" and rank not in attempt.exited:
            attempt.exited.append(rank)

    def _exit(self, event: dict[str, Any]) -> None:
        """torchrun's first failed worker of an attempt (the first said stands: an adopter may read the line again)."""
        pid, code = event.get("worker_pid"), event.get("exitcode")
        if type(pid) is not int or type(code) is not int:
            return
        number = self.pids.get(pid)
        if number is None:  # its proc_start is not folded yet (files are read one after another)
            self.waiting = [*self.waiting, event][-WAITING:]
            return
        attempt = self.attempts.get(number)
        if attempt is not None and attempt.exit is None:
            at = event.get("at")
            when = at if isinstance(at, int | float) else event["t"]
            sig = event.get("signal")
            attempt.exit = {"rank": self.rank_of[pid], "exitcode": code, "signal": sig, "t": float(when)}

    def _trim(self) -> None:
        while len(self.attempts) > KEEP:
            gone = min(self.attempts)
            del self.attempts[gone]
            self.pids = {pid: n for pid, n in self.pids.items() if n != gone}
            self.rank_of = {pid: r for pid, r in self.rank_of.items() if pid in self.pids}

    @property
    def restarts(self) -> int:
        """How many times torchrun started the ranks again (0: none seen)."""
        return max(self.attempts) if self.attempts else 0

    @property
    def current(self) -> int:
        """The attempt running now (or the last), from 1; 1 when no rank reported."""
        return self.restarts + 1

    def restarts_told(self) -> list[Restart]:
        """Each failed attempt (every attempt before the latest), oldest first."""
        out: list[Restart] = []
        for number in sorted(self.attempts)[:-1]:
            failed, then = self.attempts[number], self.attempts.get(number + 1)
            out.append(_restart(failed, then))
        return out

    def to_state(self) -> dict[str, Any]:
        return {
            "list": [asdict(a) for a in self.attempts.values()],
            "pids": {str(p): n for p, n in self.pids.items()},
            "rank_of": {str(p): r for p, r in self.rank_of.items()},
            "waiting": self.waiting,
        }

    @classmethod
    def from_state(cls, state: Any) -> Attempts:
        found = cls()
        if not isinstance(state, dict):
            return found
        found.pids = {int(p): int(n) for p, n in (state.get("pids") or {}).items()}
        found.rank_of = {int(p): int(r) for p, r in (state.get("rank_of") or {}).items()}
        found.waiting = [e for e in state.get("waiting") or () if isinstance(e, dict)][-WAITING:]
        for item in state.get("list") or ():
            try:
                attempt = Attempt(**item)
            except TypeError:
                continue  # a field this version does not know: that attempt is left out, never the summary
            found.attempts[attempt.number] = attempt
        return found


def _restart(failed: Attempt, then: Attempt | None) -> Restart:
    from gpumon.core.doctor.ended import peer_lost

    failure, ended = failed.failure, failed.exit
    silent = sorted(set(failed.ranks) - set(failed.exited) - set(failed.raised))  # gone without a word: killed
    symptom = failure is not None and peer_lost(failure["message"])
    waited = None  # a peer's symptom (its timeout, its lost connection) where a silent rank is the cause
    if ended is not None and (failure is None or (symptom and ended["rank"] not in failed.raised)):
        failure = None  # torchrun names a rank that raised nothing (killed, sys.exit): before the peers' symptoms
    elif symptom and silent:
        waited, failure, ended = failure, None, None  # the others only lost it: the silent rank is the cause
    else:
        ended = None  # an exception says more than its exit code
    if failure is not None:
        said = f"{failure['exc_type']}: {failure['message']}" if failure["message"] else failure["exc_type"]
        what = f"raised {said}"
        when, rank, where = float(failure["t"]), failure["rank"], str(failure["where"])
    elif ended is not None:  # torchrun's own log: which worker failed first, and how
        rank, what, where = ended["rank"], exit_words(ended["exitcode"], ended["signal"]), ""
        when = float(ended["t"])  # torchrun's log time (it polls every 0.1 s), else when the supervisor read it
    elif waited is not None and len(silent) == 1:  # it hung or died silently; a peer gave up waiting for it
        rank, where, when = silent[0], "", float(waited["t"])
        said = f"{waited['exc_type']}: {waited['message']}"[:160]
        what = f"went silent (no exception, no exit: hung or killed), and rank {waited['rank']} gave up on it: {said}"
    else:  # no rank raised: one was killed (a signal leaves no exception) or exited with an error code
        rank = silent[0] if len(silent) == 1 else None
        what = "ended without an exception or an exit (killed by a signal?): torchrun's log in launcher.log says how"
        when, where = failed.last_t, ""
    gap = then.first_step_t - when if then is not None and then.first_step_t is not None else None
    redone = lost = None
    so_far = False
    began, again = failed.start, then.start if then is not None else None
    if then is not None and began is not None and again is not None:
        redone = max(0, began + failed.steps - again)  # where it failed less where the next one began
        back = then.step_at(redone)
        if back is not None:
            lost = back - when
        elif then.last_step_t is not None:
            lost, so_far = then.last_step_t - when, True
    return Restart(
        attempt=failed.number + 1,
        failed_t=when,
        rank=rank,
        what=what,
        where=where,
        steps=failed.steps,
        gap_s=None if gap is None else max(0.0, gap),
        redone=redone,
        lost_s=None if lost is None else max(0.0, lost),
        lost_so_far=so_far,
    )


def exit_words(exitcode: int, signal: str | None) -> str:
    """ "was killed by SIGKILL (exit -9)" or "exited with code 3": how torchrun saw a worker end."""
    return f"was killed by {signal} (exit {exitcode})" if signal else f"exited with code {exitcode}"


def restart_line(r: Restart) -> str:
    """One failed attempt in words, as the doctor, the detail view and the alert say it."""
    who = f"rank {r.rank}" if r.rank is not None else "a rank"
    at = f" ({r.where})" if r.where else ""
    head = f"attempt {r.attempt} failed after {r.steps} steps: {who} {r.what}{at}"
    if r.gap_s is None:
        return head + "; the next attempt has not stepped yet"
    cost = f"; {r.gap_s:.1f} s from the failure to the next attempt's first step"
    if r.redone is None:
        return head + cost + "; steps redone unknown (the script reports no position)"
    lost = f"{r.lost_s:.1f} s" + (" so far" if r.lost_so_far else "") if r.lost_s is not None else "unknown"
    return head + cost + f"; {r.redone} steps redone, {lost} lost until it was back where it failed"
