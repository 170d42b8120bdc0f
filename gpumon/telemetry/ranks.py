"""Which rank a process of a run is, decided when it first reports (its first step or backward).

Every Python process of a run has the bootstrap's hooks, but only one that steps (or calls
``telemetry.log``) opens an event file; DataLoader workers and launchers never do. Its
rank is, in this order: its process group's rank (``torch.distributed.get_rank()``), a Ray
Train worker's world rank, ``RANK``, ``LOCAL_RANK``, or else the lowest index of the run never
claimed. Each rank is claimed in ``<run dir>/ranks/<N>`` (a file holding the pid, created with ``O_EXCL``): a
number held by another live process is never taken twice, so a child that inherited its
parent's ``RANK`` gets a free index instead; a dead holder's ``RANK`` is taken over (a restart). Nothing here
imports torch: ``torch.distributed`` is read from ``sys.modules``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gpumon.core.events import EventWriter
from gpumon.core.safefs import private_dirs, write_atomic
from gpumon.telemetry import ray_workers
from gpumon.telemetry.limits import read_limits

CLAIMS_DIR = "ranks"
FORKED_FROM = os.getpid()  # the process that imported this module: a different pid later means a fork


@dataclass
class Identity:
    rank: int
    origin: str  # "group", "env" (RANK or LOCAL_RANK), or "index" (claimed in the run)
    pid: int
    run_dir: str | None = None  # the run it was claimed in
    renamed_from: int | None = None  # the rank it reported as before its process group existed


_identity: Identity | None = None


def current(run_dir: str | None) -> int:
    """This process's rank, decided (and claimed in ``run_dir``) on first use."""
    ident = _identity
    if ident is not None and ident.pid == os.getpid() and ident.run_dir == run_dir:
        return ident.rank
    return decide(run_dir).rank


def decided() -> Identity | None:
    """This process's identity when it has reported as a rank, else None (a fork's parent's does not count)."""
    ident = _identity
    return ident if ident is not None and ident.pid == os.getpid() else None


def decide(run_dir: str | None) -> Identity:
    global _identity
    pid = os.getpid()
    rank, origin = _named()
    if run_dir is None:  # outside a run (or a configured writer): nothing to claim, nothing kept
        return Identity(rank if rank is not None else 0, origin, pid)
    claims = Path(run_dir) / CLAIMS_DIR
    with contextlib.suppress(OSError):
        private_dirs(claims)
    if rank is None or not _claim(claims, rank, force=origin == "group"):
        # No number of its own, or one a live process holds (a child that inherited RANK): a free
        # index, past the launcher's ranks (WORLD_SIZE) when RANK was inherited, so no real one is taken.
        start = (_env_int("WORLD_SIZE") or 0) if rank is not None else 0
        rank, origin = _claim_free(claims, start), "index"
    _identity = Identity(rank, origin, pid, run_dir)
    return _identity


def _named() -> tuple[int | None, str]:
    """The rank this process is given, and by whom: its process group, Ray Train, else RANK or LOCAL_RANK."""
    group = _group()
    if group is not None:
        return group[0], "group"
    ray = ray_workers.train_rank()
    if ray is not None:  # a Ray Train worker without a torch process group (yet)
        return ray[0], "ray"
    return _env_int("RANK", "LOCAL_RANK"), "env"


def recheck(run_dir: str | None) -> bool:
    """At a recorded step: True when the process group appeared since and names this process otherwise
    (the identity is then the group's rank; the caller reopens its event file under the new name)."""
    global _identity
    ident = decided()
    if ident is None or ident.origin == "group":
        return False
    group = _group()
    if group is None:
        return False
    if group[0] == ident.rank:
        ident.origin = "group"
        return False
    if run_dir is not None:
        _claim(Path(run_dir) / CLAIMS_DIR, group[0], force=True)
    _identity = Identity(group[0], "group", ident.pid, ident.run_dir, renamed_from=ident.rank)
    return True


def hook_group(torch: ModuleType, on_group: Callable[[], None]) -> None:
    """Call ``on_group()`` after each ``torch.distributed.init_process_group``: a rank named before its
    group existed looks again then, and costs nothing per step meanwhile."""
    dist = getattr(torch, "distributed", None)
    original = getattr(dist, "init_process_group", None)
    if original is None or getattr(original, "__gpumon__", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        on_group()
        return result

    init_process_group.__gpumon__ = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group  # type: ignore[union-attr]


def announce(w: EventWriter) -> None:
    """The first event of a rank's file: who it is and how it was started."""
    ident = decided() or decide(None)
    group = _group()
    ray = ray_workers.train_rank()
    local = ray[2] if ray is not None else ident.rank
    fields: dict[str, object] = {
        "rank": ident.rank,
        "rank_from": ident.origin,
        "local_rank": _env_int("LOCAL_RANK") if "LOCAL_RANK" in os.environ else local,
        "world_size": group[1] if group is not None else (ray[1] if ray else _env_int("WORLD_SIZE") or 1),
        "restart": _env_int("TORCHELASTIC_RESTART_COUNT") or 0,
        "host": os.uname().nodename,
        "argv": sys.argv,
        "ppid": os.getppid(),
        "started": how_started(),
        "limits": read_limits(),
    }
    if ident.renamed_from is not None:
        fields["renamed_from"] = ident.renamed_from
    w.write("proc_start", **fields)


def how_started() -> str:
    """``torchelastic`` (torchrun, accelerate launch), ``ray train`` (a Ray Train worker), ``multiprocessing
    spawn|fork|forkserver``, ``fork`` (os.fork), or ``exec`` (the run's command or a subprocess): from what
    this process already knows."""
    if ray_workers.train_rank() is not None:
        return "ray train"
    forked = os.getpid() != FORKED_FROM
    mp = sys.modules.get("multiprocessing")
    parent = None
    if mp is not None:
        with contextlib.suppress(Exception):
            parent = mp.parent_process()
    if parent is not None:
        if not forked:
            return "multiprocessing spawn"
        return "multiprocessing fork" if parent.pid == os.getppid() else "multiprocessing forkserver"
    if forked:
        return "fork"
    return "torchelastic" if "TORCHELASTIC_RUN_ID" in os.environ else "exec"


def _group() -> tuple[int, int] | None:
    """(rank, world size) of the default process group, if one exists now."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - a half-torn-down group: no answer, never an error in training
        return None
    return None


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _claim(claims: Path, rank: int, force: bool = False, take_dead: bool = True) -> bool:
    """Hold ``rank`` for this process: True when it was free, ours, its holder is dead (a restart; not for
    a free index: two processes one after the other are two ranks), or ``force``."""
    path = claims / str(rank)
    me = str(os.getpid()).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            holder = int(path.read_bytes() or b"0")
        except (OSError, ValueError):
            holder = 0
        if not force and holder != os.getpid() and (not take_dead or _alive(holder)):
            return False
        with contextlib.suppress(OSError):
            write_atomic(path, me)  # its temporary file made anew: never through a planted link
        return True
    except OSError:
        return True  # no claims folder (a read-only run dir): the number stands unchecked
    try:
        os.write(fd, me)
    except OSError:
        pass  # a full disk: the claim stands, empty (read as no live holder); training goes on
    finally:
        os.close(fd)
    return True


def _claim_free(claims: Path, start: int) -> int:
    for rank in range(start, start + 4096):
        if _claim(claims, rank, take_dead=False):
            return rank
    return start


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
