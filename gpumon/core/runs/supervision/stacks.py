"""Take every rank's Python stack from outside and say where each one waits (the supervisor, on a stall).

A rank registered ``faulthandler`` on SIGUSR2 at start-up (``telemetry/stacks.py``): its file
``stacks/<pid>.txt`` exists, so it is signalled, and what it appends is its dump. Only such processes are
signalled (to any other, SIGUSR2 is fatal; to one whose script set its own handler, ``<pid>.taken``, it is
the script's); a stopped one is not (it could not answer until resumed); py-spy, where installed, reads the
others. Each capture is also kept whole as ``stacks/stall-<n>.txt``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import psutil

from gpumon.core.doctor import hang
from gpumon.core.protocol import STACK_SIGNAL, STACKS_DIR, TAKEN
from gpumon.core.runs.record.store import write_text
from gpumon.core.runs.supervision import worker_stacks

ANSWER_S = 3.0  # how long the ranks get to write their dumps
PY_SPY_S = 10.0
WORKER_S = 0.4  # one worker's dump, read back (two equal sizes 0.1 s apart)
WORKERS_MAX_S = 10.0  # all workers' dumps: the supervisor's loop waits meanwhile, once per stall


def proc_state(pid: int) -> str:
    """ "running", "stopped" (SIGSTOP, ``T``), "traced" (a debugger, ``t``), "gone"."""
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return "gone"
    if status == psutil.STATUS_ZOMBIE:
        return "gone"
    if status == psutil.STATUS_STOPPED:
        return "stopped"
    return "traced" if status == psutil.STATUS_TRACING_STOP else "running"


def capture(
    run_dir: Path, ranks: dict[int, int], seq: int, world: int = 0, answer_s: float = ANSWER_S
) -> list[hang.RankWhere]:
    """Where each rank (pid -> rank) waits now; the dumps are kept in ``stacks/stall-<seq>.txt``. ``world``:
    the ranks of the run, these and the ended ones."""
    folder = run_dir / STACKS_DIR
    world = max(world, len(set(ranks.values())))
    states = {pid: proc_state(pid) for pid in ranks}
    sizes: dict[int, int] = {}
    for pid, state in states.items():
        path = folder / f"{pid}.txt"
        if state != "running" or not path.exists() or not catches(pid, STACK_SIGNAL):
            continue  # not now: a process past faulthandler's end (exiting) would die of SIGUSR2
        with contextlib.suppress(OSError):
            sizes[pid] = path.stat().st_size
            os.kill(pid, STACK_SIGNAL)
    dumps = _collect(folder, sizes, answer_s)
    forked = _forked_ranks(folder, {pid for pid, state in states.items() if state == "running"} - sizes.keys())
    if forked:  # ranks forked from one process (start_method="fork", Lightning's ddp_fork) share its file
        dumps.update(_inherited_dumps(folder, forked, answer_s))
    places: list[hang.RankWhere] = []
    kept: list[str] = []
    feeders: dict[int, list[int]] = {}  # a rank waiting in the DataLoader -> its workers
    for pid, rank in sorted(ranks.items(), key=lambda item: item[1]):
        state = states[pid]
        text, spy_error = dumps.get(pid, ""), ""
        if not text and state == "running":
            text, spy_error = _py_spy(pid)
        if state == "stopped":
            places.append(hang.stopped(rank, pid))
        elif state == "gone":
            places.append(hang.gone(rank, pid))
        elif state == "traced":
            places.append(hang.unknown(rank, pid, "stopped by a debugger"))
        elif not text:
            why = _why_silent(folder, pid, pid in sizes)
            tail = spy_error or f"try py-spy dump --pid {pid}"
            places.append(hang.unknown(rank, pid, f"{why}; {tail}"))
        else:
            threads = hang.parse_dump(text)
            places.append(hang.describe(rank, pid, threads[0] if threads else [], world))
            if threads and worker_stacks.waits_for_data(threads[0]):
                feeders[pid] = worker_stacks.workers(pid)
        kept.append(f"== rank {rank} (pid {pid}, {state}) ==\n{text or '(no stack)'}\n")
    if any(feeders.values()):
        places, more = _with_workers(folder, places, feeders, answer_s)
        kept.extend(more)
    with contextlib.suppress(OSError):
        write_text(folder / f"stall-{seq}.txt", "\n".join(kept))
    return places


def _forked_ranks(folder: Path, pids: set[int]) -> dict[int, list[int]]:
    """Ranks with no file of their own whose parent has one: forked from it (parent pid -> ranks)."""
    found: dict[int, list[int]] = {}
    for pid in sorted(pids):
        with contextlib.suppress(psutil.Error):
            parent = psutil.Process(pid).ppid()
            if not (folder / f"{pid}.txt").exists() and (folder / f"{parent}.txt").exists():
                found.setdefault(parent, []).append(pid)
    return found


def _with_workers(
    folder: Path, places: list[hang.RankWhere], feeders: dict[int, list[int]], answer_s: float
) -> tuple[list[hang.RankWhere], list[str]]:
    """The ranks' lines with where their DataLoader workers are, and the workers' dumps to keep."""
    states = {pid: proc_state(pid) for pids in feeders.values() for pid in pids}
    running = {rank_pid: [pid for pid in pids if states[pid] == "running"] for rank_pid, pids in feeders.items()}
    texts = _inherited_dumps(folder, running, answer_s)  # never a stopped one: it would wait
    kept = []
    for rank_pid, pids in feeders.items():
        for pid in pids:
            if pid not in texts and states[pid] == "running":
                texts[pid] = _py_spy(pid)[0]
            kept.append(f"== DataLoader worker {pid} of pid {rank_pid} ==\n{texts.get(pid) or '(no stack)'}\n")
    extended = [worker_stacks.extend(p, texts, feeders[p.pid], states) if p.pid in feeders else p for p in places]
    return extended, kept


def _inherited_dumps(folder: Path, groups: dict[int, list[int]], answer_s: float) -> dict[int, str]:
    """The dumps of forked processes (file owner -> its children), which answer one at a time into the owner's
    file: a budget of ``WORKER_S`` each for the largest group, at least ``answer_s``, at most ``WORKERS_MAX_S``."""
    most = max((len(pids) for pids in groups.values()), default=0)
    budget = min(WORKERS_MAX_S, max(answer_s, WORKER_S * most))
    return worker_stacks.dumps(folder, groups, budget, _collect, catches)


def _why_silent(folder: Path, pid: int, signalled: bool) -> str:
    if signalled:
        return "it did not answer SIGUSR2"
    if (folder / f"{pid}{TAKEN}").exists():
        return "its script handles SIGUSR2 itself, so gpumon does not send it"
    return "no faulthandler in it"


def catches(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler for ``signum`` now (``SigCgt`` in /proc/PID/status); False when unknown."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _collect(folder: Path, sizes: dict[int, int], answer_s: float) -> dict[int, str]:
    """What each signalled process appended, once its dump looks whole (its size stopped changing)."""
    deadline = time.monotonic() + answer_s
    last: dict[int, int] = {}
    done: dict[int, str] = {}
    while sizes.keys() - done.keys() and time.monotonic() < deadline:
        time.sleep(0.1)
        for pid, start in sizes.items():
            if pid in done:
                continue
            try:
                size = (folder / f"{pid}.txt").stat().st_size
            except OSError:
                continue
            if size > start and last.get(pid) == size:
                done[pid] = _read(folder / f"{pid}.txt", start, size)
            last[pid] = size
    for pid, start in sizes.items():  # a late or partial dump is still better than none
        if pid not in done:
            with contextlib.suppress(OSError):
                size = (folder / f"{pid}.txt").stat().st_size
                if size > start:
                    done[pid] = _read(folder / f"{pid}.txt", start, size)
    return done


def _read(path: Path, start: int, end: int) -> str:
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read(min(end - start, 1 << 20)).decode(errors="replace")


def _py_spy(pid: int) -> tuple[str, str]:
    """py-spy's dump and "", where it is installed and may read the process; else "" and why not ("" when
    py-spy is not installed)."""
    exe = shutil.which("py-spy")
    if exe is None:
        return "", ""
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=PY_SPY_S)
    except subprocess.TimeoutExpired:
        return "", f"py-spy dump did not answer in {PY_SPY_S:.0f} s"
    except OSError as exc:
        return "", f"py-spy could not start: {exc.strerror}"
    if out.returncode != 0:
        said = (out.stderr.strip().splitlines() or ["no reason given"])[-1]
        return "", f"py-spy could not read it: {said[:200]}"
    return _from_py_spy(out.stdout), ""


def _from_py_spy(text: str) -> str:
    """py-spy's "    func (file:line)" lines in faulthandler's form, so one parser reads both."""
    out = []
    for line in text.splitlines():
        if line.startswith("Thread "):
            out.append("Thread 0x0 (most recent call first):")
        elif line.startswith("    ") and line.rstrip().endswith(")") and " (" in line:
            func, _, rest = line.strip().rpartition(" (")
            file, _, number = rest[:-1].rpartition(":")
            if number.isdigit():
                out.append(f'  File "{file}", line {number} in {func}')
    return "\n".join(out)
