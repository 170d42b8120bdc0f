"""What the Runs view's workers hand back, and the pure reads behind them: the filter, a run's log tail,
what stopping a run asks."""

from __future__ import annotations

import os
from pathlib import Path

from textual.message import Message
from textual.notifications import SeverityLevel

from gpumon.core.logs import live
from gpumon.core.logs.tail import tail_lines
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.record.store import RunRecord
from gpumon.core.visible import visible
from gpumon.tui.widgets.log_view import LogTail

LOG_LINES = 200
LAUNCHER = None  # the log choice that is torchrun's own output (launcher.log)


class RunActionDone(Message):
    """A launch or stop finished in its worker: tell the user, maybe select a run."""

    def __init__(self, text: str, severity: SeverityLevel, select: str | None = None) -> None:
        self.text = text
        self.severity = severity
        self.select = select
        super().__init__()


def matches(summary: RunSummary, query: str) -> bool:
    """Every word of ``query`` in the run's id, kind, status or program (case-insensitive)."""
    record = summary.record
    text = f"{summary.id} {record.spec.kind} {summary.state} {record.spec.label()} {record.spec.name or ''}".lower()
    return all(word in text for word in query.lower().split())


def read_log(record: RunRecord, choice: int | None) -> LogTail:
    """The tail of one of a run's logs; an unknown choice falls back to the first log there is."""
    choices, choice = log_choice(record, choice)
    return LogTail(record.id, choices, choice, _lines(record, choices, choice))


def log_choice(record: RunRecord, choice: int | None) -> tuple[tuple[int | None, ...], int | None]:
    """The logs a run has (ranks, then torchrun's launcher.log) and the one shown: ``choice``, else the first."""
    choices: tuple[int | None, ...] = tuple(record.log_ranks())
    if record.log_path(LAUNCHER).exists():
        choices = (*choices, LAUNCHER)
    return choices, (choices[0] if choices and choice not in choices else choice)


def _lines(record: RunRecord, choices: tuple[int | None, ...], choice: int | None) -> tuple[str, ...]:
    return tuple(tail_lines(record.log_path(choice), LOG_LINES, max_bytes=64 * 1024)) if choices else ()


class LogTails:
    """``read_log`` for the feed's thread, which asks every second: while the logs folder, the shown log and its
    ``.live`` are as at the last read (size, time, inode; taken before it), nothing is listed or read again
    (a finished run's log never moves)."""

    def __init__(self) -> None:
        self._last: tuple[tuple[object, ...], Path | None, LogTail] | None = None

    def read(self, record: RunRecord, choice: int | None) -> LogTail:
        folder = _mark(record.log_path(0).parent)
        if self._last is not None:
            key, shown, tail = self._last
            if key == (record.id, choice, folder, *_marks(shown)):
                return tail
        choices, resolved = log_choice(record, choice)
        shown = record.log_path(resolved) if choices else None
        key = (record.id, choice, folder, *_marks(shown))  # before the read: a write during it is read next time
        tail = LogTail(record.id, choices, resolved, _lines(record, choices, resolved))
        self._last = (key, shown, tail)
        return tail


def _marks(log: Path | None) -> tuple[tuple[int, int, int] | None, ...]:
    return (_mark(log), _mark(live.live_path(log))) if log is not None else ()


def _mark(path: Path) -> tuple[int, int, int] | None:
    """What changes when a file or folder is written, replaced or made (never followed through a link)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def stop_question(record: RunRecord, kill: bool) -> str:
    """What T (stop) or K (kill) asks before it signals a run of this machine."""
    if kill:
        return f"Kill run {record.id} now?\nSIGKILL to all its processes ({visible(record.spec.label())})."
    return f"Stop run {record.id}?\nSIGTERM to all its processes ({visible(record.spec.label())}), SIGKILL after 10 s."
