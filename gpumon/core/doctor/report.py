"""One run's diagnosis: memory trend per rank, the named leak cause, the failure and the ranked advice.

What ``gpumon doctor RUN`` prints and the Doctor view shows. Built from the run's files only (status, events,
logs), so it works on a live run, an ended one, and one whose machine is gone.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpumon.core.doctor import stuck
from gpumon.core.doctor.advice import advise
from gpumon.core.doctor.advice_types import Advice, Context
from gpumon.core.doctor.allocator_warnings import allocator_advice
from gpumon.core.doctor.causes import Cause, census_pairs, name_causes
from gpumon.core.doctor.divergence import LossProblem, loss_advice, loss_problem
from gpumon.core.doctor.evidence import files_unreadable, run_failure
from gpumon.core.doctor.failures import Failure
from gpumon.core.doctor.goodput import ledger_advice, ledger_findings
from gpumon.core.doctor.leak import LeakState, LeakWatch
from gpumon.core.doctor.leak_advice import leak_advice
from gpumon.core.doctor.restarts import restart_advice, restart_headline, restarts_of
from gpumon.core.doctor.slow import Slowness, slow_advice, slow_findings
from gpumon.core.doctor.stall_text import collective_advice, stall_advice, stall_headline, stall_of
from gpumon.core.placement.places import of_record
from gpumon.core.protocol import CENSUS_FLAG, CONTROL_DIR
from gpumon.core.runs.reading.attempts import Restart
from gpumon.core.runs.reading.summary import run_ledger
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.spec import TORCHRUN_KINDS
from gpumon.core.runs.record.store import RunRecord


@dataclass(frozen=True)
class Diagnosis:
    run_id: str
    state: str
    leaks: dict[int, LeakState] = field(default_factory=dict)  # rank -> memory trend
    causes: tuple[Cause, ...] = ()  # what the tensor censuses saw grow
    census_pending: bool = False  # a census was asked for and has not come back yet
    censused: tuple[int, int] | None = None  # the steps of the latest census pair (named something or not)
    failure: Failure | None = None
    advice: tuple[Advice, ...] = ()
    seen: tuple[str, ...] = ()  # the run's processes: "rank 0 (pid 12)" for ranks, "pid 11" for the others
    loss: LossProblem | None = None  # a loss that turned NaN/inf or diverges (divergence.py)
    slow: tuple[Slowness, ...] = ()  # input-bound, oversubscribed (slow.py)
    stall: dict[str, Any] | None = (
        None  # status.json's stall (going on), else its last_stall (runs/supervision/stall.py)
    )
    stalled: bool = False  # the stall is going on
    dropped: dict[str, int] = field(default_factory=dict)  # log name -> bytes of output lost to a full state dir
    step_time_s: float | None = None  # the run's pace (progress.py), as its row's SPEED and ETA have it
    unreadable: str = ""  # why this user cannot read the run's files (another user's run): not "no step"
    quiet: str = ""  # "no step for 1m28s": a live run that stopped stepping (its pace has fallen with it)
    restarts: tuple[Restart, ...] = ()  # torchrun's failed attempts, oldest first (attempts.py)
    time: tuple[Slowness, ...] = ()  # a part of the wall time other than steps that is large (goodput.py)
    ledger: dict[str, float] = field(default_factory=dict)  # where the wall time went, seconds (ledger.py)
    attempt: int = 1  # the attempt running now (or the last), from 1
    max_restarts: int = 0  # the run's --max-restarts
    collective: dict[str, Any] | None = None  # a failed run's mismatched collective (stuck.py), as a stall's
    collectives: tuple[str, ...] = ()  # then each rank's last collective started and finished
    lanes: tuple[dict[str, Any], ...] = ()  # each rank's own work and wait a step, its score (lanes.py)
    lanes_unknown: str | None = None  # why there are none (ranks on a GPU, lanes.py)

    @property
    def worst(self) -> LeakState | None:
        """The rank whose memory grows fastest among those that warn, then those that grow, else any rank."""
        if not self.leaks:
            return None
        return max(self.leaks.values(), key=lambda s: (s.warning, s.state == "leak", s.grows, s.slope))

    @property
    def census_saw_nothing(self) -> bool:
        """A census pair came back and named no tensor pattern that grows."""
        return self.censused is not None and not self.causes

    def headline(self) -> str:
        if self.stall is not None and self.stalled and self.failure is None:
            return stall_headline(self.stall)
        if self.failure is not None and self.failure.kind == "host_oom" and self.causes:
            named = max(self.causes, key=lambda c: c.bytes)
            return f"{self.failure.title}; the last census named {named.title}: {named.evidence}"
        if self.failure is not None and self.collective is not None:  # gloo aborts on a size mismatch
            return f"{self.collective['headline']}; the run failed: {self.failure.title}"
        if self.failure is not None and self.failure.kind not in ("killed", "stopped"):
            return self.failure.title
        if self.loss is not None and self.loss.kind == "nonfinite":
            return self.loss.text
        worst = self.worst
        if worst is not None and worst.warning:
            return self._trend(worst)
        if self.restarts and (self.failure is None or self.failure.kind == "stopped"):  # never "no problem seen"
            return restart_headline(self.state, self.restarts, self.attempt, self.max_restarts)
        if self.failure is not None:
            return self.failure.title
        if self.loss is not None:
            return self.loss.text
        if self.slow:  # slow now beats memory that fills only after the run's end
            return self.slow[0].text
        if worst is not None and worst.grows:
            return self._trend(worst)
        if self.dropped:  # a quiet run whose output was lost: not "no problem seen"
            return dropped_text(self.dropped)
        if self.time:  # where the wall time went: after anything that names a cause
            return self.time[0].text
        if self.leaks:
            return "no problem seen"
        if self.unreadable:
            return self.unreadable
        if self.state in ("starting", "running", "stalled", "stopping", "unsupervised"):
            return "no memory samples yet"
        seen = f"; processes seen: {', '.join(self.seen)}" if self.seen else ""
        return (
            "no memory samples: no process of the run stepped a torch.optim optimizer nor ran backward() "
            f"(gpumon's steps){seen}"
        )

    def severity(self) -> str:
        """How the headline reads: "bad" (a failure, a NaN loss, a leak), "warn" (a stall going on, memory that
        grows, a diverging loss, a slow run, lost output), "ok" (memory watched, no problem seen), "none" (nothing
        to judge yet). The page's colour for it: only warnings amber, failures red."""
        worst = self.worst
        failed = self.failure is not None and self.failure.kind != "stopped"  # stopped: the user ended it
        nan = self.loss is not None and self.loss.kind == "nonfinite"
        if failed or nan or (worst is not None and worst.warning and worst.state == "leak"):
            return "bad"
        if (self.stalled and self.stall is not None) or (worst is not None and (worst.warning or worst.grows)):
            return "warn"
        if self.loss is not None or self.slow or self.dropped:
            return "warn"
        return "ok" if self.leaks else "none"

    def _trend(self, worst: LeakState) -> str:
        if worst.cause:  # what a census named first (what to fix), then how fast and how far it grows
            memory = {"gpu": "GPU memory", "host": "host memory"}.get(worst.memory, "memory")
            return f"{memory} {worst.verdict}: {worst.cause}: {worst.describe(label=False)}"
        text = worst.describe() if worst.memory else f"memory {worst.describe()}"
        if self.census_saw_nothing:
            return f"{text}; the tensor census saw no tensors or autograd graphs grow"
        if worst.memory == "host":  # a CUDA rank whose host heap grows: graph nodes live there
            return f"{text}: likely an autograd graph kept alive (e.g. total_loss += loss)"
        return text

    def to_dict(self) -> dict[str, Any]:
        failure = None
        if self.failure is not None:
            failure = asdict(self.failure)
            failure.pop("text")  # the logs hold it; the evidence lines are kept
        return {
            "schema": 1,
            "run": self.run_id,
            "state": self.state,
            "headline": self.headline(),
            "memory": {
                str(rank): {**asdict(s), "warning": s.warning, "alarm": s.alarm} for rank, s in self.leaks.items()
            },
            "causes": [asdict(c) for c in self.causes],
            "census_pending": self.census_pending,
            "censused": list(self.censused) if self.censused else None,
            "failure": failure,
            "advice": [asdict(a) for a in self.advice],
            "seen": list(self.seen),
            "loss": asdict(self.loss) if self.loss is not None else None,
            "slow": [asdict(found) for found in self.slow],
            "stall": self.stall,
            "stalled": self.stalled,
            "dropped": self.dropped,
            "step_time_s": self.step_time_s,
            "pace": 1 / self.step_time_s if self.step_time_s else None,  # steps a second, by the wall clock
            "quiet": self.quiet or None,
            "attempt": self.attempt,
            "restarts": [r.to_dict() for r in self.restarts],
            "collective": self.collective,
            "collectives": list(self.collectives),
            "lanes": list(self.lanes),
            "lanes_unknown": self.lanes_unknown,
            "time": [asdict(found) for found in self.time],
            "ledger": self.ledger,
        }


def diagnose(
    record: RunRecord,
    telemetry: RunTelemetry | None = None,
    capacity: dict[int, int] | None = None,
    watch: LeakWatch | None = None,
) -> Diagnosis:
    """Everything the doctor can say about ``record`` now. ``capacity``: rank -> device bytes, when known.

    A caller that diagnoses a live run again and again passes the same ``telemetry`` (updated) and
    ``watch``: each call then reads and analyses only what arrived since the last one.
    """
    if telemetry is None:
        telemetry = RunTelemetry(record.dir)
        telemetry.update()
    watch = watch or LeakWatch(capacity)
    leaks = watch.update(telemetry, ended=not record.live)
    census = telemetry.census
    causes = tuple(c for found in name_causes(census).values() for c in found)
    pairs = census_pairs(census)
    censused = max(((int(a.get("step", 0)), int(b.get("step", 0))) for a, b in pairs.values()), default=None)
    failure = run_failure(record, telemetry)
    place = of_record(record)
    placed = place.failure(record, telemetry, failure) if failure is not None else None
    if placed is not None:  # its place ended it (Slurm: a time limit): the place's words and fixes
        failure, place_advice = placed
    stall, stalled = stall_of(record.status)
    advice: tuple[Advice, ...] = ()
    loss = loss_problem(telemetry)
    worst = max(leaks.values(), key=lambda s: s.slope, default=None)
    world = max(record.spec.nproc * record.spec.nnodes, len(set(telemetry.pids.values())))  # a script's own ranks too
    if failure is not None:
        rank = failure.rank if failure.rank is not None else 0
        memory = telemetry.memory.get(rank)
        ceiling = watch.ceilings.get(rank)
        held = max((c for c in causes if c.rank == rank), key=lambda c: c.bytes, default=None)
        context = Context.from_argv(
            record.spec.full_args,
            world_size=world,
            allocated=tuple(int(v) for v in memory.used.values[-200:]) if memory else (),
            rss=tuple(int(v) for v in memory.reserved.values[-200:]) if memory else (),
            leak_slope=worst.slope if worst is not None and worst.warning else None,
            ceiling=ceiling.describe() if ceiling is not None and ceiling.is_limit else "",
            ceiling_source=ceiling.source if ceiling is not None else "",
            held=_held(held, censused),
            held_fix=held.advice if held is not None else "",
            workers=_others_seen(record, telemetry),
            stall=str(stall.get("headline") or "; ".join(stall.get("where") or ())) if stall else "",
            stall_ranks=", ".join(str(r) for r in (stall or {}).get("blame") or ()),
            run_id=record.id,
        )
        own = placed is not None and failure.kind.startswith(f"{place.name}_")  # a kind only that place has
        advice = place_advice if own else tuple(advise(failure, context))
        if failure.kind == "no_gpu":  # in a job, GPUs are asked of Slurm
            advice = (*place.gpus_advice(record), *advice)
    else:  # memory that grows per iteration: the named cause first, then the likely ones
        spec = record.spec
        distributed = spec.kind in TORCHRUN_KINDS or world > 1
        window = next((e for e in reversed(census) if e.get("type") == "pymem"), None)  # the latest tracemalloc
        advice = tuple(leak_advice(leaks, causes, censused, distributed=distributed, run_id=record.id, window=window))
    if loss is not None:  # before a failure's generic advice (a NaN often ends in "unknown"), after a known one
        found = tuple(loss_advice(loss, telemetry, Context.from_argv(record.spec.full_args)))
        known = failure is not None and failure.kind not in ("unknown", "killed", "stopped")
        advice = advice + found if known else found + advice
    slow = tuple(slow_findings(telemetry))
    per_step, quiet = pace_now(record, telemetry)  # the row's: a live run's taken now, so a quiet falls
    if slow and (failure is None or failure.kind in ("killed", "stopped")):  # a slow run's fixes, not a dead one's
        ranks = max(1, len(telemetry.feeding.ranks), world)
        pace = 1 / per_step if per_step else None
        found = tuple(a for finding in slow for a in slow_advice(finding, telemetry, ranks, pace, record.id))
        warned = loss is not None or any(s.warning for s in leaks.values())
        advice = advice + found if warned else found + advice
    ledger = run_ledger(record, telemetry)
    # where the wall time went (goodput.py); an ended run that never stepped had no start-up, it never trained
    stepped = record.live or telemetry.ledger.lowest() is not None
    time_found = tuple(ledger_findings(ledger, Slowness)) if stepped else ()
    if time_found and (failure is None or failure.kind in ("killed", "stopped")):
        advice = (*advice, *(a for found in time_found for a in ledger_advice(found.kind, found.text)))
    advice = (*advice, *allocator_advice(telemetry.allocator, failure))  # retries, fragmentation before an OOM
    dropped = output_dropped(record.status)
    if dropped:
        advice = (*advice, drop_advice(record, dropped))
    restarts = restarts_of(telemetry)
    if restarts and failure is None:  # a failed attempt's fixes (a failure at the end has its own, above)
        advice = (*restart_advice(restarts, record.spec.full_args, record.id), *advice)
    judged = stuck.judge(record.dir, telemetry.pids) if failure is not None and world > 1 else {}
    odd = judged.get("collective") if (judged.get("collective") or {}).get("kind") != "missing" else None
    if odd:  # the ranks' last collectives disagree: that is what to fix, not the peer's broken connection
        advice = (*(a for _, a in collective_advice(odd)), *advice)
    if stall is not None and stalled and failure is None:  # a run stuck now: what unsticks it comes first, even
        advice = (*stall_advice(stall, record.id), *advice)  # before a slow run's fixes (it is not slow: it stopped)
    return Diagnosis(
        record.id,
        record.state,
        leaks,
        causes,
        census_pending=record.live and census_pending(record.dir, census),
        censused=censused,
        failure=failure,
        advice=advice,
        seen=processes_seen(record, telemetry),
        loss=loss,
        slow=slow,
        stall=stall,
        stalled=stalled and record.live,
        dropped=dropped,
        step_time_s=per_step,
        unreadable=files_unreadable(record.dir),
        quiet=quiet,
        restarts=restarts,
        time=time_found,
        ledger=ledger,
        attempt=telemetry.attempts.current,
        max_restarts=record.spec.max_restarts,
        collective=odd,
        collectives=tuple(judged.get("collectives") or ()) if odd else (),
        lanes=tuple(lane.to_dict() for lane in telemetry.lanes.lanes()),
        lanes_unknown=telemetry.lanes.unknown(),
    )


def pace_now(record: RunRecord, telemetry: RunTelemetry) -> tuple[float | None, str]:
    """The run's seconds per step as its row has them (a live run's up to now: no step for T s, at most one in
    T), and the row's "no step for 1m28s" while it lasts."""
    progress = telemetry.progress
    if not record.live:
        return progress.step_time(), ""
    from gpumon.core.runs.reading.progress import quiet_text
    from gpumon.core.runs.reading.quiet import written

    now, last = time.time(), written(record.dir)
    quiet = quiet_text(progress.quiet(now, last), progress.median_step_s) if record.state == "running" else ""
    return progress.step_time(now, last), quiet


def output_dropped(status: dict[str, Any]) -> dict[str, int]:
    """status.json's ``output_dropped``: log name -> bytes the state dir had no room for."""
    found = status.get("output_dropped")
    if not isinstance(found, dict):
        return {}
    return {str(k): int(v) for k, v in found.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def dropped_text(dropped: dict[str, int]) -> str:
    from gpumon.core.runs.supervision.output import _size

    where = ", ".join(f"{_size(n)} from {name}" for name, n in sorted(dropped.items()))
    return f"output dropped: the state dir was full ({where})"


def drop_advice(record: RunRecord, dropped: dict[str, int]) -> Advice:
    return Advice(
        "state_dir_full",
        "Free space in gpumon's state dir",
        dropped_text(dropped) + "; training went on, those lines are not in the logs",
        f"free space on the filesystem of {record.dir.parent} (or set GPUMON_HOME to a larger one)",
    )


def _held(cause: Cause | None, censused: tuple[int, int] | None) -> str:
    """The census's finding in words, with the steps it was taken at."""
    if cause is None:
        return ""
    when = f" (censuses at steps {censused[0]} and {censused[1]})" if censused else ""
    return f"{cause.title}: {cause.evidence}{when}"


def _others_seen(record: RunRecord, telemetry: RunTelemetry) -> bool | None:
    """Whether processes beside the ranks and the run's main process were seen (DataLoader workers and the
    like); None where a launcher's own processes (torchrun) make that unknowable."""
    spec = record.spec
    if spec.kind in TORCHRUN_KINDS or spec.uses_torchrun or not telemetry.pids:
        return None
    main = record.status.get("pid")
    return any(pid != main and pid not in telemetry.pids for pid, _ in record.processes())


def processes_seen(record: RunRecord, telemetry: RunTelemetry, limit: int = 8) -> tuple[str, ...]:
    """The ranks that reported (``proc_start``), then the other processes the supervisor saw (``procs``)."""
    out = [f"rank {rank} (pid {pid})" for pid, rank in sorted(telemetry.pids.items(), key=lambda p: (p[1], p[0]))]
    others = [p[0] for p in record.status.get("procs") or () if isinstance(p, list) and p and isinstance(p[0], int)]
    main = record.status.get("pid")
    if isinstance(main, int) and main not in others:
        others.insert(0, main)
    out += [f"pid {pid}" for pid in others if pid not in telemetry.pids]
    return tuple(out[:limit]) + ((f"{len(out) - limit} more",) if len(out) > limit else ())


def census_pending(run_dir: Path, census: list[dict[str, Any]]) -> bool:
    """A census was asked for (control/census) and its last look has not arrived (a look after the first
    that promises no other: a rank looks again when its pair straddled a release, census_trigger.py)."""
    try:
        request = (run_dir / CONTROL_DIR / CENSUS_FLAG).stat().st_mtime_ns
    except OSError:
        return False
    return not any(e.get("request") == request and int(e.get("seq") or 0) >= 2 and not e.get("again") for e in census)
