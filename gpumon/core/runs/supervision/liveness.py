"""Whether a run lives, from what cannot lie: its supervisor's lock and its processes, never from a readable
status.json alone (a full disk, a crash mid-write or a hand edit can leave that file empty or cut short).

The supervisor holds ``supervisor.lock`` (flock) for its whole life, and the kernel drops it when the
supervisor dies however it dies. Who holds it is read from ``/proc/locks``, never by trying to take it: a
reader that took the lock for an instant could make a starting supervisor believe another one has the run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpumon.core.safefs import NotRegular, read_bytes, what_is

LOCK = "supervisor.lock"


def lock_holder(run_dir: Path) -> int | None:
    """The pid holding ``run_dir``'s supervisor lock (0 when the kernel shows another pid namespace's), or
    None when nobody holds it (or this machine has no /proc/locks)."""
    return flock_holder(run_dir / LOCK)


def flock_holder(path: Path) -> int | None:
    """The pid holding a flock on ``path`` (the queue's keeper.lock too), as ``lock_holder``."""
    try:
        st = os.stat(path)
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in text.splitlines():
        # "3: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter's line has "->" after the number
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and _same_file(parts[5], wanted, st.st_ino):
            pid = int(parts[4]) if parts[4].isdigit() else 0
            return pid if pid == 0 or _running(pid) else None  # a holder caught dying is no supervisor
    return None


def _running(pid: int) -> bool:
    state = _proc_state(pid)
    return state is not None and state not in (b"Z", b"X")


def frozen(pid: int) -> bool:
    """The process is stopped (SIGSTOP) or held by a tracer: it runs no code, so it answers no signal."""
    return _proc_state(pid) in (b"T", b"t")


def _proc_state(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _same_file(field: str, wanted: str, inode: int) -> bool:
    if field == wanted:
        return True
    try:  # the device as the kernel prints it may pad differently ("00:2e" or "0:2e")
        major, minor, ino = field.split(":")
        ours_major, ours_minor, _ = wanted.split(":")
        return int(ino) == inode and int(major, 16) == int(ours_major, 16) and int(minor, 16) == int(ours_minor, 16)
    except ValueError:
        return False


def read_file(path: Path) -> tuple[dict[str, Any], str | None]:
    """(the JSON object in ``path``, None), or ({}, why it cannot be read: "status.json is empty", ...)."""
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        return {}, f"{path.name} is missing"
    except NotRegular:
        return {}, f"{path.name} is {what_is(path) or 'not a regular file'}: not read"
    except OSError as err:
        return {}, f"{path.name} cannot be read ({err.strerror})"
    if not raw.strip():
        return {}, f"{path.name} is empty"
    try:
        data = json.loads(raw)
    except ValueError:
        return {}, f"{path.name} is not valid JSON (cut short?)"
    if not isinstance(data, dict):
        return {}, f"{path.name} holds no JSON object"
    return data, None
