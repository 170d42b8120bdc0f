"""The full-screen log's search, mixed into LogScreen: ``/`` opens the box, a search scans the file from its end
backwards on a thread (core/logs/search.py), the newest match at or above the view shows first, ``n``/``N``
move between matches (reading the window around one that is not held).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.screen import Screen
from textual.widgets import Input

from gpumon.core.logs.past_cap import live_matches
from gpumon.core.logs.search import Needle, ScanStep, scan
from gpumon.tui.views.runs.log_pane import LogPane
from gpumon.tui.views.runs.log_parts import Matches, SearchProgress, StreamedLog

if TYPE_CHECKING:
    from gpumon.core.runs.record.store import RunRecord

PROGRESS_S = 0.1  # a search posts its progress at most this often


class LogSearch(Screen[None]):
    """LogScreen's search: its state and reading are the screen's (log_screen.py)."""

    if TYPE_CHECKING:  # LogScreen's, which this class is the base of
        source: RunRecord | StreamedLog
        following: bool
        found: Matches
        _searches: int
        _target: int | None

        def _path(self) -> Path: ...
        def _head(self) -> None: ...
        def _status(self) -> None: ...
        def _want(self, op: str | tuple[str, int]) -> None: ...

    def _search(self, needle: Needle) -> None:
        self._searches += 1
        streamed = isinstance(self.source, StreamedLog)
        self.found.start(needle, scanning=not streamed)
        if streamed:
            self.found.add(needle.in_lines(self.query_one(LogPane).page.lines), None, done=True)
            self._jump_near()
        else:  # a capped log's latest output (held, newer than the file's lines) first, then the file's
            self.found.add(live_matches(self.query_one(LogPane).page, needle), None, done=False)
            self._scan(self._path(), needle, self._searches)
        self._status()

    @work(thread=True, exit_on_error=False, group="log-search", exclusive=True)
    def _scan(self, path: Path, needle: Needle, generation: int) -> None:
        from textual.worker import get_current_worker

        worker = get_current_worker()
        found: list[int] = []
        last: ScanStep | None = None
        posted = time.monotonic()
        for step in scan(path, needle):
            if worker.is_cancelled:
                return
            found[:0] = step.found
            last = step
            if time.monotonic() - posted >= PROGRESS_S:
                self.post_message(SearchProgress(tuple(found), step, False, generation))
                found, posted = [], time.monotonic()
        self.post_message(SearchProgress(tuple(found), last, True, generation))

    def on_search_progress(self, message: SearchProgress) -> None:
        if message.generation != self._searches:
            return
        self.found.add(message.found, message.step, message.done)
        if not self.found.jumped:
            self._jump_near(final=message.done)
        self._status()

    def _jump_near(self, final: bool = True) -> None:
        """The newest match at or above the view's last line (the first below it if none is above)."""
        pane = self.query_one(LogPane)
        index = self.found.nearest(pane.page.size if pane.pinned else pane.shown_range()[1], final)
        if index is not None:
            self.found.jumped = True
            self._go(index)

    def _go(self, index: int) -> None:
        self.found.current = index
        offset = self.found.offsets[index]
        pane = self.query_one(LogPane)
        if self.following:
            self.following = False
            self._head()
        pane.set_search(self.found.needle, offset)
        if pane.page.offsets and pane.page.offsets[0] <= offset <= pane.page.offsets[-1]:
            pane.go_to(offset)
        else:
            pane.pinned = False
            self._target = offset
            self._want(("around", offset))
        self._status()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        box = self.query_one("#log-search", Input)
        box.remove_class("-open")
        self.query_one(LogPane).focus()
        text = event.value
        if text:
            self._search(Needle(text))
        else:
            self.found.start(None)
            self._status()

    def action_search(self) -> None:
        box = self.query_one("#log-search", Input)
        box.add_class("-open")
        box.focus()

    def action_match(self, step: int) -> None:
        found = self.found
        if found.needle is None:
            self.notify("Search first: /", timeout=3, markup=False)
            return
        if not found.offsets:
            self.notify(
                f"No line holds {found.needle.text!r}" + (" yet" if found.scanning else ""), timeout=3, markup=False
            )
            return
        if found.current is None:
            self._jump_near()
            return
        index, wrapped = found.moved(step)
        if wrapped:
            self.notify(
                "Search wrapped to the " + ("first" if step > 0 else "last") + " match", timeout=2, markup=False
            )
        self._go(index)
