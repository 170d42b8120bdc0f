"""What the Runs view's workers hand back, and the pure reads behind them: the filter, a run's log tail,
what stopping a run asks."""

from __future__ import annotations

from textual.message import Message
from textual.notifications import SeverityLevel

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
    choices: tuple[int | None, ...] = tuple(record.log_ranks())
    if record.log_path(LAUNCHER).exists():
        choices = (*choices, LAUNCHER)
    if choices and choice not in choices:
        choice = choices[0]
    lines = tuple(tail_lines(record.log_path(choice), LOG_LINES, max_bytes=64 * 1024)) if choices else ()
    return LogTail(record.id, choices, choice, lines)


def stop_question(record: RunRecord, kill: bool) -> str:
    """What T (stop) or K (kill) asks before it signals a run of this machine."""
    if kill:
        return f"Kill run {record.id} now?\nSIGKILL to all its processes ({visible(record.spec.label())})."
    return f"Stop run {record.id}?\nSIGTERM to all its processes ({visible(record.spec.label())}), SIGKILL after 10 s."
