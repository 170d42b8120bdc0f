"""The full-screen log's parts that are not widgets: where its lines come from, its workers' messages, and
what a search has found so far and which match is current.

Matches are the offsets of matching lines' starts (line indexes for a streamed log), ascending. A scan
hands them over in batches from the end of the file backwards, so each batch goes in front and the
current match's index moves with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from textual.message import Message

from gpumon.core.logs.search import Needle, ScanStep
from gpumon.core.logs.window import LogPage
from gpumon.core.runs.record.store import RunRecord
from gpumon.tui.views.runs.reading import LAUNCHER


def log_name(choice: int | None) -> str:
    return "launcher" if choice is LAUNCHER else f"rank {choice}"


def log_choices(record: RunRecord) -> tuple[int | None, ...]:
    """The run's logs as the Runs view's ``l`` cycles them: rank 0, 1, …, then torchrun's launcher.log."""
    choices: tuple[int | None, ...] = tuple(record.log_ranks())
    if record.log_path(LAUNCHER).exists():
        choices = (*choices, LAUNCHER)
    return choices


def empty_log(choice: int | None, choices: tuple[int | None, ...], live: bool) -> str:
    """What an empty log reads: a live run's may still write ("no output yet"); an ended run's never will."""
    if not choices:
        return "no log yet" if live else "no log: the run ended without one"
    return f"{log_name(choice)}: {'no output yet' if live else 'ended with no output'}"


@dataclass(frozen=True)
class StreamedLog:
    """Another host's run: ``lines()`` gives what its ssh follow has brought (no file here to read)."""

    run_id: str
    host: str
    lines: Callable[[], tuple[str, ...]]


class PageRead(Message):
    def __init__(self, page: LogPage, generation: int, choices: tuple[int | None, ...]) -> None:
        self.page = page
        self.generation = generation
        self.choices = choices  # the run's logs now (a rank's log may appear after the screen opened)
        super().__init__()


class SearchProgress(Message):
    def __init__(self, found: tuple[int, ...], step: ScanStep | None, done: bool, generation: int) -> None:
        self.found = found
        self.step = step
        self.done = done
        self.generation = generation
        super().__init__()


class Matches:
    def __init__(self) -> None:
        self.needle: Needle | None = None
        self.offsets: list[int] = []
        self.current: int | None = None  # index into offsets
        self.step: ScanStep | None = None  # the scan's latest progress
        self.scanning = False
        self.jumped = False  # the first match near the view was shown

    def start(self, needle: Needle | None, scanning: bool = False) -> None:
        self.needle, self.offsets, self.current, self.step = needle, [], None, None
        self.scanning, self.jumped = scanning, False

    def add(self, found: Sequence[int], step: ScanStep | None, done: bool) -> None:
        """A batch of a scan's matches, older than every batch before it."""
        self.offsets[:0] = found
        if self.current is not None:
            self.current += len(found)
        self.step = step or self.step
        self.scanning = not done

    @property
    def current_offset(self) -> int | None:
        return self.offsets[self.current] if self.current is not None else None

    def nearest(self, bottom: int, final: bool) -> int | None:
        """The newest match at or above ``bottom`` (the view's last line); the first one when none is above
        and the scan is ``final``; None while the scan has not reached the lines above the view."""
        above = [i for i, offset in enumerate(self.offsets) if offset <= bottom]
        if above:
            return above[-1]
        return 0 if final and self.offsets else None

    def moved(self, step: int) -> tuple[int, bool]:
        """The match ``step`` away from the current one, and whether that wrapped around the ends."""
        assert self.current is not None and self.offsets
        index = self.current + step
        return index % len(self.offsets), not 0 <= index < len(self.offsets)

    def count(self) -> str:
        """ "match 3 of 17 lines (n/N)", "12+ lines · searching 40%", "no match"."""
        total = len(self.offsets)
        limited = self.step is not None and self.step.limited
        more = "+" if self.scanning or limited else ""
        scanning = ""
        if self.scanning and self.step is not None and self.step.total:
            scanning = f" · searching {100 * self.step.scanned // self.step.total}%"
        if not total:
            return "searching…" + scanning if self.scanning else "no match"
        where = f"match {self.current + 1:,} of " if self.current is not None else ""
        noun = "line" if total == 1 else "lines"
        return f"{where}{total:,}{more} {noun} (n/N){scanning}"
