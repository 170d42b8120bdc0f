"""A run's own cgroup, where the system offers one: no process of the run escapes ``gpumon stop``, whatever its
environment, session or parent (issue 49: a helper re-started with ``env -i`` and ``setsid`` after the supervisor
and runner died survived a stop that said "stopped").

A run's processes are otherwise found by the run's mark in their environment (marks.py) and as descendants of
its runner (a subreaper); a process that left both, once the supervisor and the runner are gone, is seen only by
a cgroup: every process forked inside one stays in it. Tried in order: a child of this process's own cgroup v2
(a delegated subtree: ``systemd-run --user --scope``, a container's), then the v1 ``pids`` hierarchy (root). The
runner joins the group before it starts the command (runner.py); the group's path is in status.json
(``cgroup``), or why there is none (``cgroup_why``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

ROOT = Path("/sys/fs/cgroup")
NONE_WHY = (
    "no cgroup could be made (cgroup v1 pids as root, or a delegated cgroup v2 subtree): stop ends the processes "
    "that carry the run's mark or descend from its runner; one that left both after the supervisor and runner "
    "died is not seen"
)


def _own(controller: str) -> str | None:
    """This process's cgroup path in ``controller``'s v1 hierarchy ("" for v2's), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            return path.lstrip("/")
    return None


def make(run_id: str) -> tuple[str | None, str]:
    """A new cgroup for the run: (its folder, "") or (None, why there is none). Made below the cgroup this process
    is in, never at a hierarchy's root: a job's or a service's processes stay in it (Slurm's proctrack/cgroup,
    systemd), counted and ended with it."""
    candidates = []  # (the group's folder, the prefix of gpumon's groups beside it)
    own = _own("") if (ROOT / "cgroup.controllers").exists() else None
    if own:  # v2: a sibling of our own cgroup (a process's own cgroup holds no children beside processes)
        candidates.append((ROOT / Path(own).parent / f"gpumon-{run_id}", "gpumon-"))
    pids = _own("pids")
    if pids is not None:  # v1: in a folder of gpumon's own, every group in it a run's
        candidates.append((ROOT / "pids" / pids / "gpumon" / run_id, ""))
    for folder, prefix in candidates:
        _prune(folder.parent, prefix)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "cgroup.procs").stat()
            if os.access(folder / "cgroup.procs", os.W_OK):
                return str(folder), ""
        except OSError:
            continue
    return None, NONE_WHY


def _prune(parent: Path, prefix: str) -> None:
    """Empty groups of ended runs whose end nobody wrote (their processes killed from outside): removed once a
    minute old, so a group made a moment ago for a run whose runner has not joined yet stays."""
    import time

    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(prefix):
                with contextlib.suppress(OSError):
                    if entry.is_dir() and time.time() - entry.stat().st_mtime > 60:
                        os.rmdir(entry.path)  # fails while a process is in it: only empty ones go


def join(folder: str | None, pid: int = 0) -> bool:
    """Move ``pid`` (0: this process) into the group; False where it cannot (the run then goes on without)."""
    if not folder:
        return False
    try:
        with open(Path(folder) / "cgroup.procs", "w") as fh:  # a cgroup file, not the state dir
            fh.write(f"{pid or os.getpid()}\n")
        return True
    except OSError:
        return False


def members(folder: object, runner: object = None) -> dict[int, float]:
    """Every process in the group now but the runner (it drains the output to the command's end and goes by
    itself), with its start time (pid -> create time); {} without a group."""
    if not isinstance(folder, str) or not folder:
        return {}
    try:
        pids = [int(line) for line in Path(folder, "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return {}
    found: dict[int, float] = {}
    for pid in pids:
        if pid == runner:
            continue
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                found[pid] = proc.create_time()
    return found


def remove(folder: object) -> None:
    """The group's folder, once it is empty (at the run's end)."""
    if isinstance(folder, str) and folder:
        with contextlib.suppress(OSError):
            os.rmdir(folder)
