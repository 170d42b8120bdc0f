"""A CUDA allocator snapshot kept with a run, read back offline: ``pymem/rank<N>.pickle`` (a memory window's) and
``pymem/oom<N>.pickle`` (the one taken at an out-of-memory), as telemetry/cuda_history.py keeps them.

The file is torch's ``torch.cuda.memory._snapshot()`` pickled: dicts, lists, tuples, strings and numbers only
(``segments`` of ``blocks`` with ``size``, ``state`` and the ``frames`` that allocated them). So it is unpickled
with every global refused: a pickle that names one (``os.system`` through ``__reduce__``) is refused before anything
in it runs. It is read bounded (``MAX_BYTES``), never through a link, and summarised: per device what the allocator
reserves and what is allocated, the largest free block (fragmentation), the script's lines holding the most live
bytes, and the biggest blocks. PyTorch's own viewer loads its script from a CDN; this one needs nothing.

The script's lines are told from torch's, Python's and gpumon's own frames by path, here and on another machine.
"""

from __future__ import annotations

import functools
import io
import os
import pickle
import re
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpumon.core.safefs import NotRegular, open_regular

MAX_BYTES = 64 * 1024 * 1024  # the biggest snapshot kept with a run, and read back
KEPT = re.compile(r"^(oom|rank)\d+\.pickle$")  # the names cuda_history.py keeps, in pymem/
TOP = 10  # stacks and blocks a summary lists
STACK_FRAMES = 6  # frames kept per block or line
MAX_DRAWN = 64  # segments a device's picture draws (the biggest), and pieces per segment
FREE = ("inactive",)
NOT_USERS = tuple(
    {
        os.path.realpath(p) + os.sep
        for p in (sysconfig.get_paths().get(k) for k in ("stdlib", "purelib", "platlib"))
        if p
    }
)
_GPUMON = str(Path(__file__).resolve().parents[3]) + os.sep
# a snapshot read on another machine: its Python's and packages' paths by their shape
_NOT_USERS_ANYWHERE = re.compile(r"/(site-packages|dist-packages)/|/lib/python\d[\d.]*/|/gpumon/(telemetry|core)/")


class SnapshotError(ValueError):
    """A snapshot gpumon will not read: its one line says why."""


@functools.lru_cache(maxsize=4096)  # a snapshot's frames name the same few files again and again
def script_file(filename: str) -> bool:
    """The script's own source file: not Python's, not a package's (torch's), not gpumon's, not ``<string>``; by
    its name and, where it is a link (a venv's python, an editable install), by what it points to. The one test
    for the tracemalloc window (telemetry/pymem.py), its holder search and the CUDA snapshots."""
    if filename.startswith("<"):
        return False
    for name in {filename, os.path.realpath(filename)}:
        if name.startswith((_GPUMON, *NOT_USERS)) or _NOT_USERS_ANYWHERE.search(name) is not None:
            return False
    return True


class _PlainData(pickle.Unpickler):
    """Unpickles plain data only: any class or function a pickle names is refused, never imported nor called."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The snapshot in ``path``; SnapshotError (one line) for a link, a file too big, a pickle naming code..."""
    try:
        fd = open_regular(path)
    except NotRegular as err:
        raise SnapshotError(str(err)) from None
    except OSError as err:
        raise SnapshotError(f"cannot read {path}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise SnapshotError(f"{path} is over {MAX_BYTES // 2**20} MiB: gpumon reads snapshots up to that size")
    try:
        snap = _PlainData(io.BytesIO(data)).load()
    except pickle.UnpicklingError as err:
        if str(err).startswith("it names "):
            raise SnapshotError(
                f"{path} is refused: {err}, and an allocator snapshot holds only plain data (nothing in it was run)"
            ) from None
        raise SnapshotError(f"{path} is not a pickle gpumon can read: {err}") from None
    except Exception as err:  # noqa: BLE001 - a truncated or foreign file: EOFError, ValueError, ...
        raise SnapshotError(f"{path} is not a pickle gpumon can read: {type(err).__name__}: {err}") from None
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise SnapshotError(f"{path} is not a CUDA allocator snapshot: no segments (torch.cuda.memory._snapshot())")
    return snap


def kept(run_dir: Path) -> list[Path]:
    """The snapshots kept with a run, the OOM's first; never through a link."""
    try:
        names = sorted(os.listdir(run_dir / "pymem"), key=lambda n: (not n.startswith("oom"), n))
    except OSError:
        return []
    return [run_dir / "pymem" / n for n in names if KEPT.match(n) and not (run_dir / "pymem" / n).is_symlink()]


def blocks_of(snap: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [b for seg in _segments(snap) for b in seg.get("blocks") or () if isinstance(b, dict)]


def live_by_line(
    snap: Mapping[str, Any], user: Callable[[str], bool], fallback: bool = False
) -> dict[tuple[str, int, str], tuple[int, int]]:
    """Bytes and blocks allocated now, by the script's innermost frame of the stack that allocated each; with
    ``fallback``, a block with no script frame counts at its innermost frame, one with no stack at ("", 0, "")."""
    out: dict[tuple[str, int, str], tuple[int, int]] = {}
    for block in blocks_of(snap):
        if block.get("state") != "active_allocated":
            continue
        frames = _frames(block)
        frame = next((f for f in frames if user(str(f.get("filename", "")))), None)
        if frame is None and not fallback:
            continue
        frame = frame or next(iter(frames), None)
        key = ("", 0, "") if frame is None else (str(frame.get("filename")), _int(frame.get("line")), _name(frame))
        size, count = out.get(key, (0, 0))
        out[key] = (size + _int(block.get("size")), count + 1)
    return out


def largest(snap: Mapping[str, Any], top: int = 5, user: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """The biggest blocks allocated, each with where it was allocated when history was recording: ``file`` and
    ``line`` of the script's innermost frame (``user``; else the innermost frame), and the ``stack``, innermost
    first ("linear.py:125 (forward)")."""
    blocks = [b for b in blocks_of(snap) if b.get("state") == "active_allocated"]
    out = []
    for block in sorted(blocks, key=lambda b: _int(b.get("size")), reverse=True)[:top]:
        frames = _frames(block)
        frame = next((f for f in frames if user is None or user(str(f.get("filename", "")))), None)
        frame = frame or next(iter(frames), None)
        where: dict[str, Any] = {}
        if frame is not None:
            where = {"file": os.path.basename(str(frame.get("filename"))), "line": frame.get("line"),
                     "stack": [frame_text(f) for f in frames[:STACK_FRAMES]]}  # fmt: skip
        out.append({"size": _int(block.get("size")), **where})
    return out


def frame_text(frame: Mapping[str, Any]) -> str:
    name = _name(frame)
    at = f"{os.path.basename(str(frame.get('filename')))}:{frame.get('line')}"
    return f"{at} ({name})" if name and name != "<module>" else at


def summarise(snap: Mapping[str, Any], user: Callable[[str], bool] = script_file, top: int = TOP) -> dict[str, Any]:
    """What the snapshot says, as plain data (``--json``, the text, serve's page): ``devices`` (``reserved``,
    ``allocated``, ``free``, ``largest_free``, ``segments`` and the ``drawn`` ones), ``stacks`` (the lines holding
    the most live bytes) and ``largest`` (the biggest blocks)."""
    devices: dict[int, dict[str, Any]] = {}
    for seg in _segments(snap):
        dev = devices.setdefault(_int(seg.get("device")), {"reserved": 0, "allocated": 0, "largest_free": 0,
                                                           "segments": 0, "drawn": []})  # fmt: skip
        blocks = [b for b in seg.get("blocks") or () if isinstance(b, dict)]
        allocated = sum(_int(b.get("size")) for b in blocks if b.get("state") == "active_allocated")
        dev["reserved"] += _int(seg.get("total_size"))
        dev["allocated"] += allocated
        dev["segments"] += 1
        free = [_int(b.get("size")) for b in blocks if b.get("state") in FREE]
        dev["largest_free"] = max([dev["largest_free"], *free])
        dev["drawn"].append({"size": _int(seg.get("total_size")), "allocated": allocated, "pieces": blocks})
    for dev in devices.values():
        dev["free"] = max(0, dev["reserved"] - dev["allocated"])
        dev["drawn"] = sorted(dev["drawn"], key=lambda s: int(s["size"]), reverse=True)[:MAX_DRAWN]
        for seg in dev["drawn"]:  # only the drawn segments' blocks are ordered and merged
            seg["pieces"] = _pieces(seg["pieces"])
    stacks: list[dict[str, Any]] = []
    frames = _stack_of_line(snap, user)
    for (path, line, function), (size, count) in live_by_line(snap, user, fallback=True).items():
        stacks.append({"file": os.path.basename(path), "path": path, "line": line, "function": function,
                       "bytes": size, "count": count, "stack": frames.get((path, line, function), [])})  # fmt: skip
    stacks.sort(key=lambda s: int(s["bytes"]), reverse=True)
    traces = snap.get("device_traces")
    return {
        "devices": [{"device": d, **devices[d]} for d in sorted(devices)],
        "stacks": stacks[:top],
        "largest": largest(snap, top, user),
        "trace_entries": sum(len(t) for t in traces if isinstance(t, list)) if isinstance(traces, list) else 0,
    }


def where(line: Mapping[str, Any]) -> str:
    """ "train.py:41 (step)", or "(no stack recorded)"."""
    if not line.get("path") and not line.get("file"):
        return "(no stack recorded)"
    function = str(line.get("function") or "")
    at = f"{line.get('file')}:{line.get('line')}"
    return f"{at} ({function})" if function and function != "<module>" else at


def text_lines(summary: Mapping[str, Any], size: Callable[[int], str]) -> list[str]:
    """The summary as the doctor prints it; ``size`` formats bytes."""
    lines = []
    for dev in summary.get("devices") or ():
        reserved, free, largest_free = int(dev["reserved"]), int(dev["free"]), int(dev["largest_free"])
        share = f", the largest free block {size(largest_free)}" if free else ""
        scattered = ""
        if 0 < largest_free < free:  # fragmentation: what a large allocation cannot use
            scattered = f" ({100 - 100 * largest_free // free}% of the free bytes lie in smaller pieces)"
        lines.append(f"cuda:{dev['device']}: reserved {size(reserved)} in {dev['segments']} segments, allocated "
                     f"{size(int(dev['allocated']))}, free in the cache {size(free)}{share}{scattered}")  # fmt: skip
    if not lines:
        lines.append("no segments: the allocator held no memory when the snapshot was taken")
    if summary.get("stacks"):
        lines.append("live bytes by the line that allocated them:")
        lines += [f"  {size(int(s['bytes']))} in {s['count']} blocks  {where(s)}" for s in summary["stacks"]]
        if not any(s.get("path") for s in summary["stacks"]):
            lines.append("  no stacks: the allocator was not recording history when these blocks were allocated")
    if summary.get("largest"):
        lines.append("largest blocks:")
        for block in summary["largest"]:
            stack = " < ".join(block.get("stack") or ()) or "(no stack recorded)"
            lines.append(f"  {size(int(block['size']))}  {stack}")
    return lines


def _pieces(blocks: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """A segment's blocks in address order as [size, "allocated"|"free"], neighbours of one state merged, at most
    ``MAX_DRAWN`` (the rest merged into the last)."""
    pieces: list[list[Any]] = []
    for block in sorted(blocks, key=lambda b: _int(b.get("address"))):
        state = "free" if block.get("state") in FREE else "allocated"
        if pieces and (pieces[-1][1] == state or len(pieces) >= MAX_DRAWN):
            pieces[-1][0] += _int(block.get("size"))
        else:
            pieces.append([_int(block.get("size")), state])
    return pieces


def _stack_of_line(snap: Mapping[str, Any], user: Callable[[str], bool]) -> dict[tuple[str, int, str], list[str]]:
    """Each line's stack, from its biggest live block."""
    out: dict[tuple[str, int, str], list[str]] = {}
    blocks = [b for b in blocks_of(snap) if b.get("state") == "active_allocated" and _frames(b)]
    for block in sorted(blocks, key=lambda b: _int(b.get("size")), reverse=True):
        frames = _frames(block)
        frame = next((f for f in frames if user(str(f.get("filename", "")))), frames[0])
        key = (str(frame.get("filename")), _int(frame.get("line")), _name(frame))
        if key not in out:
            out[key] = [frame_text(f) for f in frames[:STACK_FRAMES]]
    return out


# Unpickled plain data holds dicts: isinstance(x, dict) is several times cheaper than an abc's Mapping check
def _segments(snap: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in snap.get("segments") or () if isinstance(s, dict)]


def _frames(block: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [f for f in block.get("frames") or () if isinstance(f, dict)]


def _name(frame: Mapping[str, Any]) -> str:
    return str(frame.get("name") or "")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
