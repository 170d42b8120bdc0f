"""A queued run's entry: one JSON file per run in ``$GPUMON_HOME/queue/`` (0600, written atomically).

The run itself is a run directory whose status.json says ``queued`` (``gpumon runs`` lists it); the entry
says what it waits for. An entry stays after its run started (state ``started``) until the run ends: its
GPUs stay reserved until the run's memory shows, and ``--slots`` counts the CPU runs it started. Every
change goes through ``edit_lock`` so the keeper and a user's ``gpumon queue cancel`` never both win.

  queue/<run id>.json   QueueEntry
        plan.json       the keeper's latest look: each waiting run's position and reason (readers only)
        keeper.lock     flock held by the keeper for its whole life: never two keepers
        edit.lock       flock held for the instant an entry or its run's status changes
        changed         a token rewritten after every change to an entry (the keeper reads them again then)
        keeper.log      the keeper's own output
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gpumon.core.runs.record.store import read_json, write_json, write_text
from gpumon.core.safefs import open_own, read_bytes

QUEUED = "queued"  # the state a queued run's status.json holds
WAITING, STARTED = "waiting", "started"


@dataclass(frozen=True)
class QueueEntry:
    run: str  # the run's id (its directory under runs/)
    gpus: int = 0  # how many GPUs (0: a CPU run)
    gpu_mem: int | None = None  # bytes free each GPU needs; None: a GPU no process uses
    after: tuple[str, ...] = ()  # run ids that must finish successfully first
    priority: int = 0  # higher first
    seq: int = 0  # submission order (ns), the tie-break; up/down move it
    submitted: float = 0.0
    slots: int | None = None  # a CPU run: start only while fewer than this many queued CPU runs run
    state: str = WAITING
    force: bool = False  # "start now": the keeper starts it at its next look, whatever it waits for
    assigned: tuple[int, ...] = ()  # the GPUs it got
    started_at: float | None = None
    blocked_since: float | None = None  # when it first waited for GPUs (the backfill bound counts from here)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int, int]:
        """The order: a forced run first, then priority, then submission."""
        return (0 if self.force else 1, -self.priority, self.seq)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["after"] = list(self.after)
        data["assigned"] = list(self.assigned)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueueEntry:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["after"] = tuple(str(a) for a in known.get("after") or ())
        known["assigned"] = tuple(int(g) for g in known.get("assigned") or ())
        return cls(**known)


def queue_dir(root: Path) -> Path:
    path = root / "queue"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def entry_path(root: Path, run: str) -> Path:
    return queue_dir(root) / f"{run}.json"


def save(root: Path, entry: QueueEntry) -> None:
    write_json(entry_path(root, entry.run), entry.to_dict())
    _changed(root)


def remove(root: Path, run: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        entry_path(root, run).unlink()
    _changed(root)


CHANGED = "changed"


def _changed(root: Path) -> None:
    """A new token after every change, so the keeper reads the entries again only then. Not the folder's
    mtime: its clock is coarse, and two changes within a few ms leave the same mtime."""
    write_text(queue_dir(root) / CHANGED, secrets.token_hex(8))


def change_token(root: Path) -> str | None:
    """The token the last change wrote (None before any)."""
    try:
        return read_bytes(root / "queue" / CHANGED).decode(errors="replace")
    except OSError:
        return None


def load(root: Path, run: str) -> QueueEntry | None:
    data = read_json(entry_path(root, run))
    try:
        return QueueEntry.from_dict(data) if data else None
    except (TypeError, ValueError):
        return None


def load_all(root: Path) -> list[QueueEntry]:
    """Every entry, in queue order (unreadable files are skipped: a half-written one is never seen, writes
    are atomic)."""
    out = []
    for path in queue_dir(root).glob("*.json"):
        if path.name == PLAN:
            continue
        entry = load(root, path.stem)
        if entry is not None:
            out.append(entry)
    return sorted(out, key=lambda e: e.key)


def new_entry(run: str, **fields: Any) -> QueueEntry:
    return QueueEntry(run=run, seq=time.time_ns(), submitted=time.time(), **fields)


@contextlib.contextmanager
def edit_lock(root: Path) -> Iterator[None]:
    """Held while an entry and its run's status change together (the keeper starting it, a user cancelling)."""
    fd = open_own(queue_dir(root) / "edit.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


PLAN = "plan.json"


def write_plan(root: Path, plan: dict[str, Any]) -> None:
    write_json(queue_dir(root) / PLAN, plan)


_PLAN_CACHE: dict[Path, tuple[int, dict[str, Any]]] = {}


def read_plan(root: Path) -> dict[str, Any]:
    """The keeper's latest plan (``runs``: id → position, reason), read again only when the file changed."""
    path = root / "queue" / PLAN
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return {}
    cached = _PLAN_CACHE.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        data = json.loads(read_bytes(path))
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    _PLAN_CACHE[path] = (stamp, data)
    return data


def queue_fields(root: Path, run: str, plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """``queue_position`` and ``queue_reason`` of a queued run, from the keeper's plan (``plan``: read already).
    A plan written by a keeper that is stopped or gone says so: its reasons may be old."""
    plan = plan if plan is not None else read_plan(root)
    info = (plan.get("runs") or {}).get(run) or {}
    reason = info.get("reason") or "waiting for the queue's keeper to look"
    stale = keeper_stale(plan)
    return {
        "queue_position": info.get("position"),
        "queue_reason": f"{reason} (stale: {stale})" if stale and info.get("reason") else stale or reason,
    }


_STALE_CACHE: dict[int, tuple[float, str | None]] = {}


def keeper_stale(plan: dict[str, Any]) -> str | None:
    """Why the plan's keeper no longer looks (stopped, gone), in words; None while it lives and looks. The
    process is read at most once a second, whatever the number of queued runs."""
    pid = plan.get("keeper_pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    now = time.monotonic()
    cached = _STALE_CACHE.get(pid)
    if cached is not None and now - cached[0] < 1.0:
        return cached[1]
    import psutil

    try:
        proc = psutil.Process(pid)
        ours = any("gpumon.core.queue.keeper" in part for part in proc.cmdline())
        status = proc.status() if ours else None
    except psutil.Error:
        ours, status = False, None
    if not ours:
        text: str | None = f"the keeper that wrote them (pid {pid}) has ended"
    elif status == psutil.STATUS_STOPPED:
        text = f"the queue's keeper (pid {pid}) is stopped and starts nothing: kill -CONT {pid}"
    else:
        text = None
    _STALE_CACHE.clear()  # one keeper at a time: the cache never grows
    _STALE_CACHE[pid] = (now, text)
    return text


def move(entries: list[QueueEntry], run: str, step: int) -> tuple[QueueEntry, QueueEntry] | None:
    """The entry ``run`` and its neighbour with their places swapped (``step`` -1: one ahead, +1: one back,
    among the waiting ones): each takes the other's priority and submission number, so the two trade places
    and no other run moves. None when it cannot move that way."""
    waiting = [e for e in entries if e.state == WAITING]
    index = next((i for i, e in enumerate(waiting) if e.run == run), None)
    if index is None:
        return None
    other = index + step
    if not 0 <= other < len(waiting):
        return None
    mine, theirs = waiting[index], waiting[other]
    return (
        replace(mine, priority=theirs.priority, seq=theirs.seq),
        replace(theirs, priority=mine.priority, seq=mine.seq),
    )
