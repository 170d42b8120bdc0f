"""Where each rank of a stalled run waits, from its Python stack (``faulthandler``'s dump), in words.

"rank 1 waits in next_batch at train.py:14 (time.sleep)"; "rank 0 waits in all_reduce (DDP backward) at
train.py:31, for rank 1". A rank blocked in a collective that another rank never reaches (it waits in its
own code, in another collective, or has left the loop) is the classic diverged-rank hang, named as such.
A stopped process (SIGSTOP, state ``T``) is said plainly with the command that resumes it.
"""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass

# torch.distributed's collectives (their own frame names in distributed_c10d.py), and what waits on them
COLLECTIVES = frozenset((
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier", "reduce",
    "gather", "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single", "send",
    "recv", "isend", "irecv", "batch_isend_irecv", "new_group", "init_process_group",
))  # fmt: skip
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)(?: \[[^\]]*\])? \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+)$')
_CALL = re.compile(r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\s*\(")
_LIBRARY = ("/site-packages/", "/dist-packages/", "<frozen", "<string>")
_OURS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # gpumon's hooks


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    @property
    def user(self) -> bool:
        """The script's own code: not a library, not the standard library."""
        if any(part in self.file for part in _LIBRARY) or self.file.startswith(_OURS):
            return False
        return not re.search(r"/lib/python3\.\d+/", self.file)

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


def parse_dump(text: str) -> list[list[Frame]]:
    """faulthandler's all-threads dump: each thread's frames, innermost first, the main thread first (the one
    whose outermost frame is a module's top level)."""
    threads: list[list[Frame]] = []
    for line in text.splitlines():
        if _THREAD.match(line.rstrip()):
            threads.append([])
        elif threads and (found := _FRAME.match(line)):
            threads[-1].append(Frame(found.group(1), int(found.group(2)), found.group(3).strip()))
    threads = [t for t in threads if t]
    threads.sort(key=lambda t: t[-1].func != "<module>")  # stable: the main thread first
    return threads


@dataclass(frozen=True)
class RankWhere:
    rank: int
    pid: int
    status: str  # "waits", "stopped", "gone", "unknown"
    collective: str = ""  # "all_reduce", "barrier"...: what it waits in, when it is torch.distributed's
    text: str = ""  # "rank 1 waits in next_batch at train.py:14 (time.sleep)"


def _call_name(frame: Frame) -> str:
    """The call on the frame's line ("time.sleep"), read from the source as Python would show it."""
    source = linecache.getline(frame.file, frame.line).strip()
    names = [n for n in _CALL.findall(source) if n not in ("print", "if", "for", "while", "return")]
    return names[0] if names else ""


def describe(rank: int, pid: int, frames: list[Frame], world: int) -> RankWhere:
    """One rank's place from its main thread's frames (innermost first)."""
    user = next((f for f in frames if f.user), None)
    at = f" at {user.where}" if user else ""
    for frame in frames:
        if "torch/distributed" in frame.file and frame.func in COLLECTIVES:
            return RankWhere(rank, pid, "waits", frame.func, f"rank {rank} waits in {frame.func}{at}")
    backward = any("torch/autograd" in f.file and f.func in ("_engine_run_backward", "backward") for f in frames)
    if backward and world > 1:  # DDP's gradient all_reduce runs inside the autograd engine (C++)
        return RankWhere(rank, pid, "waits", "all_reduce", f"rank {rank} waits in all_reduce (DDP backward){at}")
    place = _place(frames)
    return RankWhere(rank, pid, "waits", "", f"rank {rank} waits in {place}" if place else f"rank {rank}: empty stack")


def _place(frames: list[Frame]) -> str:
    """ "next_batch at train.py:14 (time.sleep)": the script's innermost frame and the call on its line as
    written ("time.sleep", "q.get"), else the library function it entered; "" for no frames."""
    user = next((f for f in frames if f.user), None)
    if user is None:
        return f"{frames[0].func} ({frames[0].where})" if frames else ""
    inner = frames[: frames.index(user)]  # what the script's line called, gpumon's own wrappers left out
    callee = next((f for f in reversed(inner) if not f.file.startswith(_OURS)), None)
    what = _call_name(user) or (f"{callee.func} in {os.path.basename(callee.file)}" if callee else "")
    return f"{user.func} at {user.where}" + (f" ({what})" if what else "")


def worker_place(pid: int, frames: list[Frame]) -> str:
    """A DataLoader worker's place; "" while it waits for work (its loop's index queue). A forked worker's
    stack goes on below its loop into the parent's frames at the fork: those are left out."""
    loop = next((i for i, f in enumerate(frames) if f.func == "_worker_loop"), None)
    own = frames[:loop]
    if loop is None or not own or (own[-1].func == "get" and own[-1].file.endswith("queues.py")):
        return ""  # not a DataLoader worker (a forkserver, a helper), or one waiting for work
    return f"its worker {pid} waits in {_place(own)}"


def stopped(rank: int, pid: int) -> RankWhere:
    return RankWhere(rank, pid, "stopped", text=f"rank {rank} (pid {pid}) is stopped (SIGSTOP): `kill -CONT {pid}`")


def gone(rank: int, pid: int) -> RankWhere:
    return RankWhere(rank, pid, "gone", text=f"rank {rank} (pid {pid}) has exited: it left the loop")


def unknown(rank: int, pid: int, why: str) -> RankWhere:
    return RankWhere(rank, pid, "unknown", text=f"rank {rank} (pid {pid}): no stack ({why})")


def verdict(places: list[RankWhere]) -> tuple[str, str]:
    """(kind, one line): "stopped", "diverged", "collective" (every rank in the same one), "own_code", "".
    The rank(s) the others wait for are named, the stopped ones first."""
    halted = [p for p in places if p.status == "stopped"]
    if halted:
        return "stopped", "; ".join(p.text for p in halted)
    waiting = [p for p in places if p.collective]
    others = [p for p in places if not p.collective and p.status in ("waits", "gone")]
    kinds = sorted({p.collective for p in waiting})
    if waiting and others:
        blame = ", ".join(f"rank {p.rank}" for p in others)
        waits = ", ".join(f"rank {p.rank}" for p in waiting)
        where = "; ".join(p.text for p in others)
        ops = " and ".join(kinds)
        return "diverged", f"diverged-rank hang: {blame} never reached the {ops} that {waits} waits in ({where})"
    if len(kinds) > 1:
        listed = ", ".join(f"rank {p.rank} in {p.collective}" for p in waiting)
        return "diverged", f"diverged-rank hang: the ranks wait in different collectives ({listed})"
    if waiting and len(waiting) == len(places):
        return "collective", f"every rank waits in {kinds[0]}: the collective itself does not complete"
    if others:
        return "own_code", "; ".join(p.text for p in others)
    return "", ""


def blamed(places: list[RankWhere]) -> list[int]:
    """The ranks outside any collective (in their own code, stopped, gone) while others wait in one."""
    outside = [p.rank for p in places if not p.collective and p.status in ("waits", "gone", "stopped")]
    return outside if any(p.collective for p in places) or any(p.status == "stopped" for p in places) else []


def lines(places: list[RankWhere]) -> list[str]:
    """Each rank's line; a rank in a collective says whom it waits for."""
    blamed_ranks = blamed(places)
    out = []
    for p in sorted(places, key=lambda p: p.rank):
        text = p.text
        if p.collective and blamed_ranks:
            text += ", for " + ", ".join(f"rank {r}" for r in blamed_ranks)
        out.append(text)
    return out
