"""A run whose directory was deleted while it trained: no file names it any more, but its processes still carry
its mark (``GPUMON_RUN_DIR``, marks.py) and its supervisor names the directory in its command line. ``gpumon
stop`` finds it by them and ends it: the run's processes directly (no status.json to go through), its
supervisor with SIGTERM, which it honours (it has no end to write)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from gpumon.core.events import RUN_DIR_ENV
from gpumon.core.runs.record.store import process_alive
from gpumon.core.runs.supervision.liveness import frozen

SUPERVISOR = "gpumon.core.runs.supervision.supervisor"
KILL_WAIT_S = 5.0  # after SIGKILL: for the kernel to take them
SUPERVISOR_END_S = 15.0  # a supervisor told to stop ends within this (its run's processes are gone by then)


@dataclass
class Homeless:
    dir: Path
    procs: dict[int, float] = field(default_factory=dict)  # the run's processes: pid -> start time
    supervisors: dict[int, float] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.dir.name


def find(runs_dir: Path, text: str) -> list[Homeless]:
    """The runs under ``runs_dir`` whose id is ``text`` (or starts with it) whose directory is gone while a
    process of theirs lives: this user's processes, by their mark or (a supervisor) their command line."""
    if not text.strip():
        return []
    found: dict[Path, Homeless] = {}
    me = os.getuid()

    def named(path: str | None) -> Homeless | None:
        if not path:
            return None
        run_dir = Path(path)
        if run_dir.parent != runs_dir or not run_dir.name.startswith(text) or _kept(run_dir):
            return None
        return found.setdefault(run_dir, Homeless(run_dir))

    for proc in psutil.process_iter(["uids", "create_time", "cmdline"]):
        info = proc.info
        uids, started, argv = info.get("uids"), info.get("create_time"), info.get("cmdline") or []
        if uids is None or uids.real != me or started is None or proc.pid == os.getpid():
            continue
        if SUPERVISOR in argv and (run := named(argv[-1])) is not None:
            run.supervisors[proc.pid] = started
            continue
        try:
            run = named(proc.environ().get(RUN_DIR_ENV))
        except psutil.Error:
            continue
        if run is not None:
            run.procs[proc.pid] = started
    exact = [run for run in found.values() if run.id == text]
    return exact or list(found.values())


def _kept(run_dir: Path) -> bool:
    """Its directory is still there: a run's process may make its events/ again after it was deleted."""
    return (run_dir / "spec.json").exists() or (run_dir / "status.json").exists()


def end(run: Homeless, kill: bool, grace_s: float) -> tuple[list[int], list[int]]:
    """Signal the run's processes (SIGTERM, SIGKILL after ``grace_s``; SIGKILL at once with ``kill``) and its
    supervisor (SIGTERM; a stopped one is SIGKILLed). Returns (processes left, supervisors that did not end on
    SIGTERM and were SIGKILLed)."""
    for pid, started in run.supervisors.items():
        if process_alive(pid, started):
            _send(pid, signal.SIGKILL if frozen(pid) else signal.SIGTERM)
    first = signal.SIGKILL if kill else signal.SIGTERM
    deadline = time.monotonic() + (0.0 if kill else grace_s)
    _signal(run, first)
    looked = time.monotonic()
    while _alive(run.procs) and time.monotonic() < deadline:
        time.sleep(0.1)
        if time.monotonic() - looked >= 1.0:  # one started meanwhile (a restart, a helper) gets the same signal
            _look_again(run, first)
            looked = time.monotonic()
    if _alive(run.procs):
        _signal(run, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while _alive(run.procs) and time.monotonic() < deadline:
            time.sleep(0.1)
    deadline = time.monotonic() + SUPERVISOR_END_S
    while _alive(run.supervisors) and time.monotonic() < deadline:
        time.sleep(0.1)
    stubborn = _alive(run.supervisors)
    for pid in stubborn:
        _send(pid, signal.SIGKILL)
    return _alive(run.procs), stubborn


def _look_again(run: Homeless, sig: signal.Signals) -> None:
    for again in find(run.dir.parent, run.id):
        if again.dir == run.dir:
            new = {pid: t for pid, t in again.procs.items() if pid not in run.procs}
            run.procs.update(new)
            for pid in new:
                _send(pid, sig)


def _signal(run: Homeless, sig: signal.Signals) -> None:
    for pid, started in run.procs.items():
        if process_alive(pid, started):
            _send(pid, sig)


def _send(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _alive(procs: dict[int, float]) -> list[int]:
    return [pid for pid, started in procs.items() if process_alive(pid, started)]
