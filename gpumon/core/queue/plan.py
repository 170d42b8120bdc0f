"""Which queued runs start now, and why each other one waits, in words. Pure: no process, no file, no clock.

Rules (docs/queue.md):
- Order: a run asked to start now, then priority (higher first), then submission.
- A GPU fits a run when its free memory (total − used by any process − what runs the queue just started
  will still take) has been at least the run's ``--gpu-mem`` for the whole settle time; without
  ``--gpu-mem``, when no process used it and nothing was reserved on it for that time.
- Backfill: the first run that waits for GPUs (the head) holds the GPUs that fit it; a run behind it may
  start on the others. Once the head has waited ``backfill_s`` for GPUs, nothing behind it starts on a
  GPU until it does (CPU runs still do). So a big run is never starved for ever, and small runs are not
  blocked by it for ever either.
- More GPUs than the host has: the run fails (it could never start). A dependency that ended other than
  finished fails it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpumon.core.queue.entry import WAITING, QueueEntry

GIB = 1024**3
FAILED_DEPS = ("failed", "stopped", "killed", "lost", "exited")


@dataclass(frozen=True)
class GpuState:
    index: int
    total: int
    used: int
    settled_free: int | None  # the least free memory over the settle window; None: not watched that long
    settled_idle: bool  # no process on it over the whole window
    settling_s: float = 0.0  # how long it has been watched (or fitting) so far, for the words
    procs: tuple[tuple[str, int, str, int], ...] = ()  # (user, pid, command, bytes), the biggest first


@dataclass(frozen=True)
class Decision:
    run: str
    action: str  # "start", "wait", "fail"
    reason: str
    gpus: tuple[int, ...] = ()
    position: int | None = None  # 1 = next, among the runs that wait
    blocked_since: float | None = None
    impossible: bool = False


@dataclass
class Inputs:
    entries: Sequence[QueueEntry]
    gpus: Sequence[GpuState]
    now: float
    settle_s: float = 10.0
    backfill_s: float = 600.0
    reserved: Mapping[int, tuple[str, int]] = field(default_factory=dict)  # GPU → (run, bytes still to come)
    dep_states: Mapping[str, str | None] = field(default_factory=dict)  # run id → state (None: no such run)
    cpu_running: int = 0  # CPU runs the queue started that still run


def size_text(n: int) -> str:
    gib = n / GIB
    return f"{gib:.0f} GiB" if gib >= 10 or gib == int(gib) else f"{gib:.1f} GiB"


def plan(inp: Inputs) -> list[Decision]:
    """One decision per waiting entry, in queue order."""
    by_index = {g.index: g for g in inp.gpus}
    taken: dict[int, str] = {}  # GPUs given out in this plan
    held: dict[int, str] = {}  # GPUs held for the head
    head: QueueEntry | None = None
    closed = False  # the backfill bound reached: nothing behind the head starts on a GPU
    cpu = inp.cpu_running
    out: list[Decision] = []
    position = 0
    for entry in [e for e in inp.entries if e.state == WAITING]:
        dep = _dependency(entry, inp.dep_states)
        if dep is not None and dep[0] == "fail":
            out.append(Decision(entry.run, "fail", dep[1]))
            continue
        if entry.gpus > len(by_index):
            have = f"{len(by_index)} GPU{'s' if len(by_index) != 1 else ''}"
            why = f"it needs {entry.gpus} GPUs and this host has {have}: it can never start"
            out.append(Decision(entry.run, "fail", why, impossible=True))
            continue
        if dep is not None and not entry.force:
            position += 1
            out.append(Decision(entry.run, "wait", dep[1], position=position))
            continue
        if entry.gpus == 0:
            if entry.slots is not None and cpu >= entry.slots and not entry.force:
                position += 1
                runs = f"{cpu} queued CPU run{'s' if cpu != 1 else ''}"
                why = f"waiting for a CPU slot: {runs} running, --slots {entry.slots}"
                out.append(Decision(entry.run, "wait", why, position=position))
            else:
                cpu += 1
                out.append(Decision(entry.run, "start", "started: no GPU asked"))
            continue
        if entry.force:
            chosen = sorted((g for g in inp.gpus if g.index not in taken), key=lambda g: (g.used, g.index))
            picked = tuple(sorted(g.index for g in chosen[: entry.gpus]))
            taken.update({i: entry.run for i in picked})
            out.append(Decision(entry.run, "start", "started now, as asked", gpus=picked))
            continue
        if closed:
            position += 1
            assert head is not None
            why = (
                f"behind {head.run}, which has waited for GPUs over {inp.backfill_s:.0f} s: "
                "no run starts on a GPU ahead of it until it does"
            )
            out.append(Decision(entry.run, "wait", why, position=position, blocked_since=entry.blocked_since))
            continue
        fits = [g for g in inp.gpus if g.index not in taken and g.index not in held and _fits(entry, g, inp)]
        if len(fits) >= entry.gpus:
            # Best fit: the GPUs with the least room that still fits, so the roomy ones stay for bigger runs.
            fits.sort(key=lambda g: (_free(g, inp), g.index))
            picked = tuple(sorted(g.index for g in fits[: entry.gpus]))
            taken.update({i: entry.run for i in picked})
            out.append(Decision(entry.run, "start", "started", gpus=picked))
            continue
        position += 1
        since = entry.blocked_since if entry.blocked_since is not None else inp.now
        why = _reason(entry, inp, taken, held)
        if head is None:
            head = entry
            held = {g.index: entry.run for g in fits}
            if inp.now - since >= inp.backfill_s:
                closed = True
        out.append(Decision(entry.run, "wait", why, position=position, blocked_since=since))
    return out


def _dependency(entry: QueueEntry, states: Mapping[str, str | None]) -> tuple[str, str] | None:
    """("fail", why) for a dependency that can never finish, ("wait", why) for one still to finish."""
    waiting = []
    for run in entry.after:
        state = states.get(run)
        if state is None:
            return "fail", f"dependency {run} no longer exists"
        if state in FAILED_DEPS:
            return "fail", f"dependency {run} ended {state}, not finished"
        if state != "finished":
            waiting.append(f"{run} ({state})")
    if waiting:
        return "wait", f"waiting for {', '.join(waiting)} to finish"
    return None


def _free(g: GpuState, inp: Inputs) -> int:
    reserved = inp.reserved.get(g.index, ("", 0))[1]
    return (g.settled_free if g.settled_free is not None else -1) - reserved


def _fits(entry: QueueEntry, g: GpuState, inp: Inputs) -> bool:
    if g.settled_free is None:
        return False
    if entry.gpu_mem is None:
        return g.settled_idle and g.index not in inp.reserved
    return _free(g, inp) >= entry.gpu_mem


def _reason(entry: QueueEntry, inp: Inputs, taken: Mapping[int, str], held: Mapping[int, str]) -> str:
    """ "waiting for 2 GPUs with 20 GiB free: GPU 3 is used by alice's pid 1234, python train.py (71 GiB)" """
    n = entry.gpus
    want = f"{n} GPU{'s' if n != 1 else ''}"
    want += f" with {size_text(entry.gpu_mem)} free" if entry.gpu_mem is not None else " no process uses"
    why = []
    for g in inp.gpus:
        if g.index in taken:
            why.append(f"GPU {g.index} goes to {taken[g.index]}")
        elif g.index in held:
            why.append(f"GPU {g.index} is held for {held[g.index]}, first in line")
        elif not _fits(entry, g, inp):
            why.append(_gpu_words(entry, g, inp))
    shown = why[:3] + ([f"and {len(why) - 3} more"] if len(why) > 3 else [])
    return f"waiting for {want}: " + "; ".join(shown) if shown else f"waiting for {want}"


def _gpu_words(entry: QueueEntry, g: GpuState, inp: Inputs) -> str:
    free_now = g.total - g.used
    run, reserved = inp.reserved.get(g.index, ("", 0))
    need = entry.gpu_mem
    fits_now = free_now - reserved >= need if need is not None else (not g.procs and not reserved)
    if reserved and (need is None or free_now >= need):
        return f"GPU {g.index} is reserved for {run}, which started on it ({size_text(reserved)} to come)"
    if fits_now:  # free enough now, not for the whole settle time yet
        return f"GPU {g.index} is free, settling ({g.settling_s:.0f} of {inp.settle_s:g} s)"
    if g.procs:
        user, pid, command, used = g.procs[0]
        more = f" and {len(g.procs) - 1} more" if len(g.procs) > 1 else ""
        return f"GPU {g.index} is used by {user}'s pid {pid}, {command} ({size_text(used)}){more}"
    return f"GPU {g.index} has {size_text(max(0, free_now))} free"
