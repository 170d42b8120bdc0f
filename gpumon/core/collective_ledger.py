"""Each rank's last collective started and finished, in a small file the supervisor reads at a stall.

The ground floor, like ``protocol.py``: the rank writes it (``telemetry/coll_ledger.py``) and the supervisor
and the doctor read it. A rank blocked inside a collective runs no Python, so the record must already be out
when it blocks: ``stacks/<pid>.coll`` is two fixed slots of ``SLOT`` bytes mapped into the rank's memory, the
first the last collective started, the second the last one that returned. A write is a memory copy (no
system call), and it survives the rank's crash (a gloo size mismatch aborts the process): the page cache
keeps what was copied. Each slot holds one line ``seq TAB bytes TAB unix-ms TAB op TAB group TAB where``
(bytes -1: unknown), padded with spaces; a slot being written when it is read decodes as None.
"""

from __future__ import annotations

import os
from typing import Any

from gpumon.core.protocol import STACKS_DIR

SUFFIX = ".coll"
SLOT = 256
P2P = ("send", "recv")  # numbered apart from the group's collectives (as the Flight Recorder's p2p_seq_id)
FIELDS = ("seq", "bytes", "ms", "op", "group", "where")


def ledger_path(run_dir: str | os.PathLike[str], pid: int) -> str:
    """A process's ledger: ``<run dir>/stacks/<pid>.coll``."""
    return os.path.join(run_dir, STACKS_DIR, f"{pid}{SUFFIX}")


def encode(op: str, seq: int, group: str, nbytes: int | None, where: str, t: float) -> bytes:
    """One slot's bytes: the numbers first, then the call's names, made once per call site (tabs and newlines in
    them become spaces, and a long name is cut)."""
    names = _NAMES.get((op, group, where))
    if names is None:
        if len(_NAMES) > 4096:  # names made on the fly (a group per step): never a growing cache
            _NAMES.clear()
        fields = (op[:40], group[:60], where[-100:])
        names = _NAMES[op, group, where] = "\t".join(f.replace("\t", " ").replace("\n", " ") for f in fields).encode(
            errors="replace"
        )
    return (b"%d\t%d\t%d\t%s\n" % (seq, -1 if nbytes is None else nbytes, t * 1000, names)).ljust(SLOT)


_NAMES: dict[tuple[str, str, str], bytes] = {}


def decode(raw: bytes) -> dict[str, Any] | None:
    """A slot's record, or None (empty, torn, or not ours)."""
    line, newline, _ = raw.partition(b"\n")
    parts = line.decode(errors="replace").split("\t")
    if not newline or len(parts) != len(FIELDS):
        return None
    seq, nbytes, ms, op, group, where = parts
    try:
        return {"op": op, "seq": int(seq), "group": group, "bytes": None if nbytes == "-1" else int(nbytes),
                "where": where, "t": int(ms) / 1000}  # fmt: skip
    except ValueError:
        return None


def read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """(last started, last finished) from a ledger, or None when the process called no collective."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        raw = os.read(fd, 2 * SLOT)
    except OSError:
        return None
    finally:
        os.close(fd)
    started = decode(raw[:SLOT])
    return (started, decode(raw[SLOT : 2 * SLOT])) if started else None


def in_flight(started: dict[str, Any], finished: dict[str, Any] | None) -> bool:
    """Whether the last collective started has not returned."""
    return finished is None or (finished["group"], finished["seq"]) != (started["group"], started["seq"])


def read_ranks(run_dir: str | os.PathLike[str], pids: dict[int, int]) -> dict[int, Any]:
    """pid -> rank read into rank -> (last started, last finished), for the processes that called a collective;
    where a rank had several processes (torchrun's restarts) the one that started a collective last."""
    out: dict[int, Any] = {}
    for pid, rank in pids.items():
        found = read(ledger_path(run_dir, pid))
        if found is not None and (rank not in out or found[0]["t"] >= out[rank][0]["t"]):
            out[rank] = found
    return out
