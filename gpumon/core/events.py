"""The one event protocol: versioned JSON lines in a run's ``events/`` folder.

Every writer (each training rank, the telemetry bootstrap, the launcher's
supervisor, the Tune callback) appends to its own file, so lines from different
processes never interleave and no lock is needed. Each event is one
``os.write`` of a whole line on an O_APPEND descriptor: nothing sits in a
buffer, so a killed process loses no event, and the writer never waits on a
reader. See docs/events.md.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumon.core.safefs import NotRegular, open_own, open_regular, private_dirs, read_bytes, say_once, write_atomic

VERSION = 1
RUN_DIR_ENV = (
    "GPUMON_RUN_DIR"  # every process of a run carries it: its events' folder, and its mark (runs/record/marks.py)
)
EVENTS_DIR = "events"
SUFFIX = ".jsonl"
GZ = ".gz"
MAX_LINE = 1 << 20  # a longer line is a bug; the reader skips it rather than holding it in memory
BYTES_READ = 0  # raw event bytes read by every EventReader in this process (what the cost tests count)


def _jsonable(value: Any) -> Any:
    """Plain JSON types; numpy scalars and 0-d tensors become Python numbers, the rest a string."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # NaN/inf are not JSON
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalar, 0-d array
    if callable(item):
        try:
            return _jsonable(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


_PLAIN = (int, str, bool, type(None))


def encode(kind: str, source: str, fields: Mapping[str, Any], now: float | None = None) -> bytes:
    """One event line. ``v``, ``type``, ``src``, ``t`` and ``pid`` are set by the protocol."""
    event: dict[str, Any] = {"v": VERSION, "type": kind, "src": source, "t": now if now is not None else time.time()}
    event["pid"] = os.getpid()
    for key, value in fields.items():
        # The per-step hot path holds only plain values: skip the conversion walk for them.
        event[key] = (
            value if type(value) in _PLAIN or (type(value) is float and math.isfinite(value)) else _jsonable(value)
        )
    return (_dumps(event) + "\n").encode()


_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class EventWriter:
    """Appends events for one source (``rank0``, ``launcher``, ``tune``) of one run."""

    def __init__(self, run_dir: str | os.PathLike[str], source: str) -> None:
        self.source = source
        folder = Path(run_dir) / EVENTS_DIR
        private_dirs(folder)
        # One file per process: DataLoader workers or a forked helper never share a file.
        self.path = folder / f"{source}.{os.getpid()}{SUFFIX}"
        # a link or FIFO planted at this process's name is removed (said once), never followed nor fatal
        self._fd: int | None = open_own(self.path, os.O_WRONLY | os.O_APPEND)
        self.failed: str | None = None

    def write(self, kind: str, /, **fields: Any) -> None:  # positional: an `alert` event has a field `kind`
        if self._fd is None:
            return
        try:
            os.write(self._fd, encode(kind, self.source, fields))
        except OSError as err:  # a full disk must not stop training
            self.failed = str(err)

    def write_line(self, line: bytes) -> None:
        """One event already encoded as ``encode`` would (a per-step hot path formats its fixed shape itself)."""
        if self._fd is None:
            return
        try:
            os.write(self._fd, line)
        except OSError as err:
            self.failed = str(err)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class _Tail:
    offset: int = 0
    partial: bytes = b""
    stream: Any = None  # a compressed file being read in chunks: kept open between polls (no re-decompression)


CHUNK = 4 * 1024 * 1024  # bytes read from one file per poll: a run of any length is folded in bounded memory


@dataclass
class EventReader:
    """Tails every event file of a run; ``poll()`` returns only what is new, at most ``CHUNK`` bytes of each
    file (``more`` says a file had more: poll again).

    Lines that do not parse, lack a known version, or are not objects are
    skipped and counted in ``skipped``; they never stop the reader.
    """

    run_dir: Path
    skipped: int = 0
    more: bool = False  # the last poll stopped at CHUNK in some file
    _tails: dict[str, _Tail] = field(default_factory=dict)

    def files(self) -> list[Path]:
        folder = self.run_dir / EVENTS_DIR
        try:
            return sorted(p for p in folder.iterdir() if p.name.endswith((SUFFIX, SUFFIX + GZ)))
        except OSError:
            return []

    def offsets(self) -> dict[str, int]:
        """Per file, the bytes of whole lines read so far: where a reader resuming from here starts."""
        return {name: tail.offset - len(tail.partial) for name, tail in self._tails.items() if tail.offset >= 0}

    def resume(self, offsets: dict[str, int], skipped: int = 0) -> None:
        """Start each file at ``offsets`` (from ``offsets()``, e.g. a run's summary), not at its beginning."""
        self._tails = {str(name): _Tail(int(offset)) for name, offset in offsets.items()}
        self.skipped = skipped

    def poll(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        self.more = False
        for path in self.files():
            events.extend(self._read(path))
        events.sort(key=lambda e: e.get("t", 0.0))
        return events

    def each(self) -> Iterator[dict[str, Any]]:
        """Every event not read yet, chunk by chunk (memory bounded by ``CHUNK`` per file, not by the run)."""
        while True:
            yield from self.poll()
            if not self.more:
                return

    def _read(self, path: Path) -> list[dict[str, Any]]:
        if path.name.endswith(GZ):  # a closed file, compressed at the run's end: read once, from its offset
            name = path.name[: -len(GZ)]
            tail = self._tails.setdefault(name, _Tail())
            if tail.offset < 0:
                return []
            try:
                if tail.stream is None:
                    # kept open across polls, closed at its end; never through a link, never a FIFO's wait
                    raw = os.fdopen(open_regular(path), "rb")
                    tail.stream = gzip.GzipFile(fileobj=raw)
                    tail.stream.myfileobj = raw  # closed with it, as gzip.open(name) closes its own file
                    tail.stream.seek(tail.offset)
                data = tail.stream.read(CHUNK)
            except (OSError, EOFError, gzip.BadGzipFile):
                data = b""
            if len(data) == CHUNK:
                tail.offset += len(data)
                self.more = True
            else:
                with contextlib.suppress(OSError, AttributeError):  # None: it never opened
                    tail.stream.close()
                tail.stream, tail.offset = None, -1  # done: nothing is appended to a compressed file
            return self._lines(tail, data)
        tail = self._tails.setdefault(path.name, _Tail())
        if tail.offset < 0:
            return []
        try:
            with os.fdopen(open_regular(path), "rb") as fh:  # a link or FIFO there: refused, said once
                fh.seek(tail.offset)
                data = fh.read(CHUNK)
        except FileNotFoundError:  # compressed at the run's end between the listing and now: read its copy
            packed = path.with_name(path.name + GZ)
            return self._read(packed) if packed.exists() else []
        except NotRegular as err:
            say_once(str(err))
            return []
        except OSError:
            return []
        if not data:
            return []
        tail.offset += len(data)
        self.more = self.more or len(data) == CHUNK
        return self._lines(tail, data)

    def _lines(self, tail: _Tail, data: bytes) -> list[dict[str, Any]]:
        global BYTES_READ
        BYTES_READ += len(data)
        lines = (tail.partial + data).split(b"\n")
        tail.partial = lines.pop()  # an unfinished last line waits for its newline
        if len(tail.partial) > MAX_LINE:
            tail.partial = b""
            self.skipped += 1
        out = []
        for line in lines:
            if not line.strip():
                continue
            event = parse(line)
            if event is None:
                self.skipped += 1
            else:
                out.append(event)
        return out


def parse(line: bytes | str) -> dict[str, Any] | None:
    """An event, or None for a line this version cannot read."""
    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(event, dict) or event.get("v") != VERSION or not isinstance(event.get("type"), str):
        return None
    if not isinstance(event.get("t"), int | float):
        return None
    return event


def compress_closed(run_dir: Path, prefix: str = "rank") -> tuple[int, int]:
    """gzip the event files of ``prefix`` writers once the run ended (about 8x smaller); (bytes before, after).

    Tune's files stay plain: the Trials view reads them. A file is replaced only once its compressed copy is
    whole on disk, so a crash here loses nothing.
    """
    before = after = 0
    for path in sorted((run_dir / EVENTS_DIR).glob(f"{prefix}*{SUFFIX}")):
        try:
            data = read_bytes(path)
        except NotRegular as err:  # planted: not ours to pack (and a FIFO would hold the run's end)
            say_once(str(err))
            continue
        packed = gzip.compress(data, compresslevel=6)
        target = path.with_name(path.name + GZ)
        write_atomic(target, packed, sync=True)
        path.unlink()
        before, after = before + len(data), after + len(packed)
    return before, after
