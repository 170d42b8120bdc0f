"""The run's output, drained by the supervisor: a full or slow state dir never touches the training.

The command's stdout/stderr (and, under torchrun, each rank's, through a FIFO
per local rank in ``logs/``) is a pipe that threads here empty into the log
files. A reader thread only reads the pipe and queues what it read (bounded,
``QUEUE_BYTES``); a writer thread writes the queue to the log. A write that
fails (ENOSPC, EDQUOT) drops that output and counts it; the next write that
succeeds first says how much was dropped. A log keeps at most ``cap`` bytes:
its head as written, then a line saying output is cut, and when the run ends
the last ``tail`` bytes after a line saying how much was cut. The file is only
ever appended to, so readers following it from an offset keep working; while
the run lives, its latest output past the cap is in ``<log>.live``
(core/logs/live.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import threading
import time
from collections import deque
from pathlib import Path

from gpumon.core.config import ConfigError, config_section
from gpumon.core.logs import live
from gpumon.core.safefs import NotRegular, open_regular, private_dirs, say_once, take_back

DEFAULT_CAP = 64 * 1024 * 1024  # per rank log: ~30 min of a flood at 40 kB/s, hours of normal output
MIN_CAP = 64 * 1024
QUEUE_BYTES = 8 * 1024 * 1024  # read but not yet written: past this the reader waits for the writer
STALL_S = 2.0  # ... unless the writer has taken nothing for this long (a hung disk): then output is dropped
PIPE_BYTES = 1024 * 1024  # the pipe's own buffer (Linux F_SETPIPE_SZ): fewer wake-ups of the drain
CHUNK = 256 * 1024
QUIET_S = 0.05  # a write this long after the last one first checks that the log is still the file it writes
RANK_MARK = b"\0gpumon-rank "  # a torchrun rank's first bytes on its FIFO: which rank<N>.log it writes
PIPES_ENV = "GPUMON_RANK_PIPES"
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2}
_UNITS |= {"g": 1024**3, "gb": 1024**3, "gib": 1024**3}


def parse_size(text: object) -> int:
    """``"64 MiB"``, ``"512k"``, ``1048576`` -> bytes; ConfigError on anything else."""
    if isinstance(text, int):
        return text
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not found or found.group(2).lower() not in _UNITS:
        raise ConfigError(f'[runs] log_cap = "{text}" is not a size: write e.g. "64 MiB"')
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def log_cap() -> int:
    """``[runs] log_cap`` of config.toml (bytes per rank log), else 64 MiB; never below 64 KiB."""
    value = config_section("runs").get("log_cap", DEFAULT_CAP)
    return max(MIN_CAP, parse_size(value))


def log_cap_kept() -> tuple[int, str]:
    """``log_cap()``, or the default and why: a supervisor runs on whatever config.toml holds when it starts."""
    try:
        return log_cap(), ""
    except ConfigError as err:
        return DEFAULT_CAP, f"config: {err}; the run goes on with the default log cap ({_size(DEFAULT_CAP)})"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class CappedLog:
    """One log file: appended to, dropping (and counting) while the disk refuses, cut past its cap."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path = path
        self.cap = cap
        self.tail_keep = cap // 8  # the tail kept (in memory) once the head reached the cap
        self.fd: int | None = None
        self.size = _regular_size(path)
        self.dropped = 0  # bytes lost to a full disk, not yet reported in the log
        self.dropped_total = 0
        self.cut = 0  # bytes past the cap, not kept
        self.tail: deque[bytes] = deque()
        self.tail_bytes = 0
        self.checked = time.monotonic()
        self.wrote = 0.0  # when output was last written (monotonic)
        self.published = 0.0  # when <log>.live was last written
        self.unpublished = False  # output past the cap not yet in <log>.live

    def open(self) -> int:
        now = time.monotonic()
        # A cheap look at each write after a quiet moment, at most once a second in a flood: output that follows
        # a pause never goes to a file replaced during it.
        if self.fd is not None and (now - self.checked >= 1.0 or now - self.wrote >= QUIET_S):
            self.checked = now
            if not self._still_ours():  # replaced under the run (a link, a new file): write where readers look
                with contextlib.suppress(OSError):
                    os.close(self.fd)
                self.fd = None
        if self.fd is None:
            if (what := take_back(self.path.parent)) is not None:  # a link (a file) in place of logs/
                private_dirs(self.path.parent)
                say_once(f"{self.path.parent} was {what}: not followed, removed; the run's logs go on there")
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
            try:
                self.fd = open_regular(self.path, flags)
            except NotRegular:  # a link or a FIFO planted in its place: removed, never written through
                what = take_back(self.path)
                self.fd = open_regular(self.path, flags)
                self.size = _regular_size(self.path)
                note = f"{self.path} was {what}: not followed, removed; the run's output goes on here"
                say_once(note)
                self._write(f"[gpumon: {note}]\n".encode())
        return self.fd

    def _still_ours(self) -> bool:
        if os.path.islink(self.path.parent):  # a link planted as logs/: O_NOFOLLOW guards the last part only
            return False
        try:
            here, ours = os.lstat(self.path), os.fstat(self.fd or -1)
        except OSError:
            return False
        return (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino)

    def _write(self, data: bytes | memoryview) -> int:
        written = os.write(self.open(), data)
        self.wrote = time.monotonic()
        self.size += written
        return written

    def _try(self, data: bytes) -> bool:
        """Write all of ``data`` or count what did not fit; False when the disk refused."""
        if self.dropped:
            note = f"\n[gpumon: {_size(self.dropped)} of output dropped here: the state dir was full]\n"
            try:
                self._write(note.encode())
            except OSError:
                self.dropped += len(data)
                self.dropped_total += len(data)
                return False
            self.dropped = 0
        view = memoryview(data)
        while view:
            try:
                view = view[self._write(view) :]
            except OSError as err:
                if err.errno == errno.EINTR:
                    continue
                self.dropped += len(view)
                self.dropped_total += len(view)
                return False
        return True

    def write(self, data: bytes) -> None:
        if self.cut == 0:
            room = max(0, self.cap - self.tail_keep - self.size)
            head, data = data[:room], data[room:]
            if head:
                self._try(head)
            if not data:
                return
            cap, keep = _size(self.cap), _size(self.tail_keep)
            self._try(
                f"\n[gpumon: this log reached its cap ({cap}, [runs] log_cap): output is cut "
                f"from here (its latest output is in {self.path.name}{live.SUFFIX} while the run lives; "
                f"its last {keep} follow here when it ends)]\n".encode()
            )
        self.cut += len(data)
        self.tail.append(data)
        self.tail_bytes += len(data)
        while self.tail_bytes - len(self.tail[0]) >= self.tail_keep:
            self.tail_bytes -= len(self.tail.popleft())
        self.unpublished = True
        self.publish_due()

    def publish_due(self) -> bool:
        """Write ``<log>.live`` if output came past the cap since it was last written, at most once every
        ``live.EVERY_S``; True while some is left for later."""
        if not self.unpublished:
            return False
        if time.monotonic() - self.published < live.EVERY_S:
            return True
        self._publish(final=False)
        return False

    def _publish(self, final: bool) -> None:
        parts, held = [], 0
        for chunk in reversed(self.tail):  # the latest LIVE_BYTES, never a join of the whole kept tail
            parts.append(chunk)
            held += len(chunk)
            if held >= live.LIVE_BYTES:
                break
        body = b"".join(reversed(parts))[-live.LIVE_BYTES :]
        live.publish(self.path, self.cut - len(body), body, final)
        self.published, self.unpublished = time.monotonic(), False

    def close(self) -> None:
        if self.cut:
            tail = b"".join(self.tail)[-self.tail_keep :]
            self._try(
                f"\n[gpumon: {_size(self.cut - len(tail))} of output cut here (log cap {_size(self.cap)}); "
                f"the last {_size(len(tail))} follow]\n".encode()
                + tail
            )
            self._publish(final=True)
        elif self.dropped:
            self._try(b"")
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


class Drain:
    """Empties pipes into logs on two threads: one reads (never blocked by the disk), one writes."""

    def __init__(self, logs: Path, cap: int | None = None) -> None:
        self.logs = logs
        self.cap = cap if cap is not None else log_cap()
        self.files: dict[str, CappedLog] = {}
        self.queue: deque[tuple[str, bytes]] = deque()
        self.queued = 0
        self.overflow = 0  # read while the queue was full (a stalled disk): dropped
        self.cond = threading.Condition()
        self.readers: list[threading.Thread] = []
        self.writer = threading.Thread(target=self._write_loop, name="log-writer", daemon=True)
        self.closing = False
        self.progress = time.monotonic()  # when the writer last took a chunk
        self.holds: list[int] = []  # our own write ends of the FIFOs: no EOF between a rank's restarts
        self.writer.start()

    def pipe(self, name: str) -> tuple[int, int]:
        """A pipe drained into ``logs/<name>``: (write end, a read end) for the child; close both after Popen.
        The child holds the read end (same fd number: ``output_fd`` in status.json), so a SIGKILLed
        supervisor never turns the run's next print into EPIPE: output waits in the pipe (then blocks)
        until an adopter drains it again."""
        read, write = os.pipe2(os.O_CLOEXEC)
        _grow(write)
        self._put(name, b"", touch=True)  # the log exists from the start, as readers expect
        self._read(read, name)
        return write, os.dup(read)

    def reattach(self, pid: object, fd: object, name: str) -> None:
        """An adopter drains what the dead supervisor drained: the main pipe through the run's main process's
        held read end, and each rank's FIFO by its path (the ranks hold them open read-write)."""
        with contextlib.suppress(OSError, TypeError):
            if isinstance(pid, int) and isinstance(fd, int):
                self._read(os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC), name)
        for path in sorted(self.logs.glob("rank*.pipe")):
            with contextlib.suppress(OSError):
                read = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
                os.set_blocking(read, True)
                self._read(read, f"{path.stem}.log", marks=True)

    def fifos(self, count: int) -> None:
        """``logs/rank<L>.pipe`` for local ranks 0..count-1: each torchrun rank writes its output there."""
        for local in range(count):
            path = self.logs / f"rank{local}.pipe"
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.mkfifo(path, 0o600)
            read = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self.holds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
            os.set_blocking(read, True)
            _grow(read)
            self._read(read, f"rank{local}.log", marks=True)

    def _read(self, fd: int, name: str, marks: bool = False) -> None:
        """``marks``: a torchrun rank's FIFO, where a (re)started rank names its log; never the main pipe,
        where the same bytes in a script's own output would send the rest of it to another log."""
        thread = threading.Thread(target=self._read_loop, args=(fd, name, marks), name=f"log-{name}", daemon=True)
        thread.start()
        self.readers.append(thread)

    def _read_loop(self, fd: int, name: str, marks: bool) -> None:
        try:
            while chunk := os.read(fd, CHUNK):
                while marks and (at := chunk.find(RANK_MARK)) >= 0:  # a (re)started rank says which log is its own
                    end = chunk.find(b"\n", at)
                    self._put(name, chunk[:at])
                    label = chunk[at + len(RANK_MARK) : end].decode(errors="replace").strip()
                    name = f"rank{int(label)}.log" if label.isdigit() else name
                    self._put(name, b"", touch=True)
                    chunk = chunk[end + 1 :] if end >= 0 else b""
                self._put(name, chunk)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _put(self, name: str, data: bytes, touch: bool = False) -> None:
        if not data and not touch:
            return
        with self.cond:
            # A full queue waits for the writer (back-pressure, as a file write would) while it makes
            # progress; a writer stuck in one write for STALL_S (a hung disk) has the output dropped.
            while self.queued + len(data) > QUEUE_BYTES and time.monotonic() - self.progress < STALL_S:
                self.cond.wait(0.1)
            if self.queued + len(data) > QUEUE_BYTES:
                self.overflow += len(data)
                log = self.files.get(name)
                if log is not None:
                    log.dropped += len(data)
                    log.dropped_total += len(data)
                return
            self.queue.append((name, data))
            self.queued += len(data)
            self.cond.notify_all()

    def _write_loop(self) -> None:
        live_due = False  # some log's output past its cap is not in its <log>.live yet
        while True:
            with self.cond:
                while not self.queue and not self.closing:
                    if not self.cond.wait(live.EVERY_S if live_due else None):
                        break  # quiet for a second: the last output past a cap goes to <log>.live
                if not self.queue and self.closing:
                    return
                name, data = self.queue.popleft() if self.queue else ("", b"")
                self.queued -= len(data)
                self.progress = time.monotonic()
                self.cond.notify_all()
            if not name:  # outside the lock: a slow disk never holds up the readers
                live_due = any([log.publish_due() for log in list(self.files.values())])
                continue
            log = self.files.get(name)
            if log is None:
                log = self.files[name] = CappedLog(self.logs / name, self.cap)
            if data:
                log.write(data)
                live_due = live_due or log.unpublished
            else:
                with contextlib.suppress(OSError):
                    log.open()

    def note(self, name: str, text: str) -> None:
        """A line of gpumon's own in a log (e.g. the command could not start)."""
        self._put(name, text.encode())

    def close(self, patience_s: float = 3.0) -> int:
        """After the run: read what is left (bounded: a leftover helper may hold a pipe), finish every log.
        Returns the bytes dropped in all (a full disk or a stalled one)."""
        for fd in self.holds:
            with contextlib.suppress(OSError):
                os.close(fd)
        deadline = time.monotonic() + patience_s
        for thread in self.readers:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.writer.join(max(1.0, deadline - time.monotonic()))
        for log in list(self.files.values()):
            log.close()
        for path in self.logs.glob("rank*.pipe"):
            with contextlib.suppress(OSError):
                path.unlink()
        return sum(log.dropped_total for log in self.files.values())

    def dropped_by_log(self) -> dict[str, list[int]]:
        """Log name -> [bytes dropped in all, of them not yet said in the log] (after ``close``)."""
        return {name: [log.dropped_total, log.dropped] for name, log in self.files.items() if log.dropped_total}


def _regular_size(path: Path) -> int:
    """The size of the log already there (a restarted or adopted run appends), 0 for none or not a file."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _grow(fd: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def open_rank_pipe(run_dir: str, local_rank: int, rank: int) -> int | None:
    """A torchrun rank's end of its FIFO (the supervisor reads it), after saying which rank it is; None when
    the supervisor made none (an older supervisor): the rank then writes its log itself."""
    path = os.path.join(run_dir, "logs", f"rank{local_rank}.pipe")
    try:  # read-write: never EPIPE if the supervisor dies (an adopter opens the FIFO by its path again)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # a file put there is not the supervisor's pipe: not written
        os.close(fd)
        return None
    os.write(fd, RANK_MARK + str(rank).encode() + b"\n")
    return fd
