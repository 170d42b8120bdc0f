"""Files of the state dir opened as files: never through a link planted there, never blocking on a FIFO.

Everything gpumon keeps in its state dir is a regular file it made. A symbolic link there was put by
someone else: following it would write a run's status into, chmod, or append a log to a file outside the
state dir (as root: any file). A FIFO in place of a log would hang whoever opens it. So files are opened
with ``O_NOFOLLOW`` (a link at the last component fails with ELOOP) and ``O_NONBLOCK`` (a FIFO opens at
once, or fails with ENXIO for a writer with no reader), then ``fstat`` must say regular. A refusal is
``NotRegular``, an OSError saying what was there; ``say_once`` tells stderr once per process, not a
traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import sys
from collections.abc import Callable
from pathlib import Path

_SAID: set[str] = set()
_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISDIR, "a folder"),
)


class NotRegular(OSError):
    """A path where gpumon keeps a file holds a link, a FIFO, a device or a folder: not opened."""


def what_is(path: str | os.PathLike[str]) -> str | None:
    """ "a link to /etc/passwd", "a FIFO", ...; None for a regular file or nothing at all."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"a link to {os.readlink(path)}"
        except OSError:
            return "a link"
    for test, name in _KINDS:
        if test(st.st_mode):
            return name
    return None


def refusal(path: str | os.PathLike[str], what: str, done: str = "not followed") -> NotRegular:
    return NotRegular(errno.ELOOP if what.startswith("a link") else errno.EINVAL, f"{path} is {what}: {done}")


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """``os.open`` of a regular file only (created with ``O_CREAT`` in ``flags``); NotRegular otherwise."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EMLINK):
            what = what_is(path)
            if what is not None:
                raise refusal(path, what) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refusal(path, what_is(path) or "not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """A regular file's whole content; NotRegular for a link, a FIFO..., the usual OSError otherwise."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def write_atomic(path: Path, data: bytes, sync: bool = False) -> None:
    """Replace ``path`` whole (a reader sees the old file or the new one), 0600; ``sync``: on disk before it
    replaces. The temporary file is made anew (``O_EXCL``): a link planted at its name is removed, never
    written through."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileExistsError:
        what = what_is(tmp)
        if what is None:  # a file: another thread's write in progress, or a dead process's with our pid
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        else:  # a planted link (or FIFO): removed, never written through
            say_once(f"{tmp} was {what}: not followed, removed")
            os.unlink(tmp)
        fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no empty temporary file is left per try (a supervisor retries)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def take_back(path: Path) -> str | None:
    """``path`` should be gpumon's own regular file: what stands there otherwise (a link, a FIFO) is removed,
    so the next open creates the file anew. Returns what was removed (for the caller to say), else None."""
    what = what_is(path)
    if what is None or what == "a folder":
        return None
    try:
        os.unlink(path)
    except OSError:
        return None
    return what


def open_own(path: Path, flags: int) -> int:
    """``open_regular`` of a file only gpumon makes (a lock, its own log), with ``O_CREAT``: something planted
    in its place is removed (said once) and the file made anew, so the run goes on."""
    try:
        return open_regular(path, flags | os.O_CREAT)
    except NotRegular:
        what = take_back(path)
        say_once(f"{path} was {what}: not followed, removed")
        return open_regular(path, flags | os.O_CREAT)


def say_once(message: str) -> None:
    """One line on stderr, once per process for each message."""
    if message in _SAID:
        return
    _SAID.add(message)
    with contextlib.suppress(OSError, ValueError):  # no stderr (a daemon's closed one): the refusal holds
        print(f"gpumon: {message}", file=sys.stderr, flush=True)


# Folders in the state dir are 0700, parents included: mkdir(mode=0o700, parents=True) and os.makedirs give the
# mode to the last folder only, and a run dir moved away under a live run came back 0755.
def private_dirs(path: str | os.PathLike[str]) -> None:
    """Make ``path`` and each missing folder above it, each 0700; folders that exist are left as they are."""
    missing: list[str] = []
    current = os.fspath(path)
    while current and not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise
