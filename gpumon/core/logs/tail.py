"""The last lines of a log, read from its end in one bounded read, drawn as a terminal draws them."""

from __future__ import annotations

import os
from pathlib import Path

from gpumon.core.logs import live
from gpumon.core.logs.terminal import render, whole_frames
from gpumon.core.safefs import NotRegular, open_regular

TAIL_BYTES = 256 * 1024


def tail_lines(path: Path, lines: int = 200, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last ``lines`` lines of a log without reading all of it; never empty when the file is not.

    Each line is its latest frame (``\\r``). A read that starts inside a line drops that cut line, unless
    it is a bar's frames (the HF Trainer's loss line after a bar's clearing) or all there is (a 50 MB line
    with no newline): then its end is the line. A log past its cap is read from ``<log>.live`` while it
    lives (core/logs/live.py), so its last lines are the run's latest, not the ones before the cut."""
    if lines <= 0:
        return []
    got = live.read(path, None, max_bytes)  # past its cap the log's latest output is there while the run lives
    if got is not None and not got[0].final:
        data, cut = got[1], True  # the output past a cap begins wherever the cap fell
    else:
        try:
            with os.fdopen(open_regular(path), "rb") as fh:  # never waits on a FIFO, never reads through a link
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                data, cut = fh.read(max_bytes), size > max_bytes
        except OSError:
            return []
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    if cut and raw:  # the first line was cut: its whole frames are its end, else it goes
        if b"\r" in raw[0] or len(raw) == 1:
            raw[0] = whole_frames(raw[0])
        else:
            raw = raw[1:]
    return [render(r.decode("utf-8", "replace")) for r in raw[-lines:]]


def unreadable(path: Path) -> str | None:
    """Why the log at ``path`` cannot be read, in words ("... is a FIFO: not followed", "permission denied
    ..."), or None when it can be or is not there yet."""
    try:
        os.close(open_regular(path))
    except FileNotFoundError:
        return None
    except NotRegular as err:
        return str(err.strerror)
    except PermissionError:
        return f"cannot read {path}: permission denied{_owned(path)}"
    except OSError as err:
        return f"cannot read {path}: {err.strerror or err}"
    return None


def _owned(path: Path) -> str:
    """ " (its run belongs to alice: run gpumon as alice)" for a run folder of another user, else ""."""
    import pwd

    for folder in (path.parent.parent, path.parent):  # runs/<id>, then runs/<id>/logs
        try:
            uid = os.stat(folder).st_uid
        except OSError:
            continue
        if uid != os.geteuid():
            try:
                owner = pwd.getpwuid(uid).pw_name
            except KeyError:
                owner = f"uid {uid}"
            return f" (its run belongs to {owner}: run gpumon as {owner})"
    return ""
