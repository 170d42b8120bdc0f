"""Where a rank's DataLoader workers are, when the rank waits for its next batch at a stall.

A stall inside the DataLoader is most often one worker stuck in the dataset's own code (a hung network
mount, a lock taken before the fork, a decoder that never returns); the rank's stack alone only says it
waits. A worker forked from the rank inherited its faulthandler registration and its open stacks file
(``telemetry/stacks.py``): it is signalled only while it still catches SIGUSR2 and has not taken the
signal for itself (``<pid>.taken``), after the rank answered and one worker per rank at a time, since their
dumps land in the rank's file. A worker started with spawn ran the bootstrap and has a file of its own.
py-spy, where installed, reads the others.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from gpumon.core.doctor import hang
from gpumon.core.protocol import STACK_SIGNAL, TAKEN

DATA_PATH = "torch/utils/data/"
SHOWN = 3  # busy workers named on the rank's line; the rest are counted


def waits_for_data(frames: list[hang.Frame]) -> bool:
    """The rank's main thread is inside the DataLoader's iterator."""
    return any(DATA_PATH in frame.file for frame in frames)


def workers(pid: int) -> list[int]:
    """The rank's child processes that may be its DataLoader workers: forked (the rank's own command line)
    or started by multiprocessing's spawn; not its resource tracker nor other programs."""
    try:
        parent = psutil.Process(pid)
        command = parent.cmdline()
        children = parent.children()
    except psutil.Error:
        return []
    found = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            line = child.cmdline()
            spawned = any("multiprocessing.spawn" in part or "multiprocessing.forkserver" in part for part in line)
            if (line == command or spawned) and child.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                found.append(child.pid)
    return sorted(found)


Collect = Callable[[Path, dict[int, int], float], dict[int, str]]
Catches = Callable[[int, int], bool]


def dumps(
    folder: Path, by_rank: dict[int, list[int]], answer_s: float, collect: Collect, catches: Catches
) -> dict[int, str]:
    """Each worker's dump (worker pid -> text), for the workers that may be signalled: in rounds, one worker
    per rank's file at a time, within ``answer_s`` in all. ``collect`` reads what a file gained."""
    deadline = time.monotonic() + answer_s
    pending = {rank_pid: list(pids) for rank_pid, pids in by_rank.items()}
    texts: dict[int, str] = {}
    while any(pending.values()) and time.monotonic() < deadline:
        sizes: dict[int, int] = {}  # the file's owner -> its size before the signal
        sent: dict[int, int] = {}  # the file's owner -> the worker that writes into it
        for rank_pid, queue in pending.items():
            while queue:
                worker = queue[0]
                owner = worker if (folder / f"{worker}.txt").exists() else rank_pid
                if owner in sizes:
                    break  # the rank's file already takes a dump this round
                queue.pop(0)
                path = folder / f"{owner}.txt"
                if (folder / f"{worker}{TAKEN}").exists() or not path.exists() or not catches(worker, STACK_SIGNAL):
                    continue  # not ours to signal: py-spy reads it
                with contextlib.suppress(OSError):
                    sizes[owner] = path.stat().st_size
                    os.kill(worker, STACK_SIGNAL)
                    sent[owner] = worker
        if not sent:
            break
        got = collect(folder, sizes, max(0.2, deadline - time.monotonic()))
        texts.update({worker: got[owner] for owner, worker in sent.items() if owner in got})
    return texts


def extend(
    place: hang.RankWhere, dumps_by_pid: dict[int, str], pids: list[int], states: dict[int, str]
) -> hang.RankWhere:
    """The rank's line, with where its busy workers are (or that they are idle); ``states``: pid ->
    ``stacks.proc_state``."""
    if not pids:
        return place
    busy: list[str] = []
    unread: list[int] = []
    idle = 0
    for pid in pids:
        text = dumps_by_pid.get(pid, "")
        if states.get(pid) == "stopped":
            busy.append(f"its worker (pid {pid}) is stopped (SIGSTOP): `kill -CONT {pid}`")
        elif states.get(pid) == "gone":
            continue
        elif not text:
            unread.append(pid)
        elif said := hang.worker_place(pid, next(iter(hang.parse_dump(text)), [])):
            busy.append(said)
        else:
            idle += 1
    parts = busy[:SHOWN] + ([f"+{len(busy) - SHOWN} more"] if len(busy) > SHOWN else [])
    if idle and not busy:
        parts.append(f"its {idle} DataLoader worker(s) wait for work")
    if unread:
        listed = ", ".join(str(pid) for pid in unread[:SHOWN])
        parts.append(f"worker(s) {listed} not read (py-spy dump --pid {unread[0]})")
    if not parts:
        return place
    return hang.RankWhere(place.rank, place.pid, place.status, place.collective, f"{place.text}: {'; '.join(parts)}")
