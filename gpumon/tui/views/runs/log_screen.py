"""The selected run's log, full screen (``o`` in the Runs view): search (log_search.py), follow, rank switching,
long lines chopped or wrapped (log_pane.py).

Every read is a core call on a thread worker (core/logs/): the log opens at its tail, scrolling reads one
bounded chunk past the window's edge, follow reads what was appended from the last offset, and a search
scans the file from its end backwards a chunk at a time, so a 2 GB log costs what a 2 KB one does until
it is searched. Another host's run shows the lines streamed through ssh (the newest 200): search and
scrolling cover only those, and the header says so.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Static

from gpumon.core.logs.past_cap import PastCapWindow
from gpumon.core.logs.window import KEEP, LogPage
from gpumon.core.runs.record.store import RunRecord
from gpumon.tui.views.runs.log_pane import LogPane
from gpumon.tui.views.runs.log_parts import (
    Matches,
    PageRead,
    StreamedLog,
    empty_log,
    log_choices,
    log_name,
)
from gpumon.tui.views.runs.log_search import LogSearch
from gpumon.tui.widgets.footer import KeysFooter

POLL_S = 0.5  # follow reads this often
KEEP_LINES = KEEP  # lines the window holds (the rest is read again when scrolled to)
FAR = 1 << 30  # half screens sideways that reach a line's end (ctrl+→, as less's ESC-})


class LogScreen(LogSearch):
    """One log at a time of one run; ``l``/``L`` switch logs, ``escape`` goes back to the Runs view."""

    DEFAULT_CSS = """
    LogScreen #log-head { height: 1; background: $panel; padding: 0 1; }
    LogScreen #log-status { height: 1; padding: 0 1; color: $text-muted; }
    LogScreen #log-search { display: none; }
    LogScreen #log-search.-open { display: block; }
    """
    BINDINGS = [
        Binding(
            "escape,q",
            "close",
            "back",
            id="log_close",
            tooltip="back to the Runs view, as q leaves less (or close the search box)",
        ),
        Binding("slash", "search", "search", id="log_search", tooltip="search the log (literal; capitals: exact case)"),
        Binding("w", "wrap", "wrap", id="log_wrap", tooltip="long lines wrapped / chopped (less -S; ← →)"),
        Binding("n", "match(1)", "next match", id="log_match_next", tooltip="next match (further down)"),
        Binding("N", "match(-1)", "previous match", id="log_match_prev", tooltip="previous match (further up)"),
        Binding("f", "follow", "follow", id="log_follow", tooltip="follow on/off: new lines show, the end stays shown"),
        Binding("l", "log_rank(1)", "next log", id="log_rank_next", tooltip="next log: rank 0, 1, …, the launcher"),
        Binding("L", "log_rank(-1)", "previous log", show=False, id="log_rank_prev", tooltip="previous log"),
        Binding("up,k", "scroll(-1)", "up", show=False, id="log_up", tooltip="one line up (follow stops)"),
        Binding("down,j", "scroll(1)", "down", show=False, id="log_down", tooltip="one line down"),
        Binding("pageup", "page(-1)", "page up", show=False, id="log_page_up", tooltip="a page up (follow stops)"),
        Binding("pagedown,space", "page(1)", "page down", show=False, id="log_page_down", tooltip="a page down"),
        Binding("home", "start", "start", show=False, id="log_start", tooltip="the log's first lines"),
        Binding("end,G", "end", "end", show=False, id="log_end", tooltip="the log's last lines"),
        Binding("right", "sideways(1)", "right", show=False, id="log_right", tooltip="half a screen right (chopped)"),
        Binding("left", "sideways(-1)", "left", show=False, id="log_left", tooltip="half a screen left"),
        Binding("ctrl+right", f"sideways({FAR})", "ends", show=False, id="log_ends", tooltip="the longest line's end"),
        Binding("ctrl+left", f"sideways({-FAR})", "starts", show=False, id="log_starts", tooltip="the lines' start"),
    ]

    def __init__(self, source: RunRecord | StreamedLog, choice: int | None = 0, follow: bool = True) -> None:
        super().__init__()
        self.source = source
        self.choices: tuple[int | None, ...] = ()  # the worker lists them (with each read)
        self.choice = choice
        self.following = follow
        self.window: PastCapWindow | None = None
        self.generation = 0
        self._busy = False
        self._wanted: str | tuple[str, int] | None = None
        self.found = Matches()
        self._searches = 0  # which search a progress message belongs to
        self._target: int | None = None  # an offset to show once the window around it is read

    @property
    def run_id(self) -> str:
        return self.source.run_id if isinstance(self.source, StreamedLog) else self.source.id

    def compose(self) -> ComposeResult:
        yield Static(id="log-head")
        yield LogPane(id="log-lines")
        yield Input(placeholder="search: enter finds, escape closes (n/N: next/previous match)", id="log-search")
        yield Static(id="log-status")
        yield KeysFooter()  # keys left out whole where the width is short, as the views' footer

    def on_mount(self) -> None:
        self._open()
        self.set_interval(POLL_S, self._poll)
        self.query_one(LogPane).focus()

    # -- reading ---------------------------------------------------------------------
    def _open(self) -> None:
        self.generation += 1
        pane = self.query_one(LogPane)
        pane.pinned, pane.top, pane.sub = True, 0, 0
        if isinstance(self.source, StreamedLog):
            self._show_streamed()
        else:
            self.window = PastCapWindow(self._path(), keep=KEEP_LINES)
            pane.empty = empty_log(self.choice, self.choices, self.source.live)
            self._want("tail")
        self._head()
        if self.found.needle is not None:
            self._search(self.found.needle)

    def _path(self) -> Path:
        assert isinstance(self.source, RunRecord)
        return self.source.log_path(self.choice)

    def _show_streamed(self) -> None:
        assert isinstance(self.source, StreamedLog)
        lines = self.source.lines()
        pane = self.query_one(LogPane)
        if lines is not pane.page.lines:
            n = len(lines)
            pane.show(LogPage(lines, tuple(range(n)), 0, n, n))
            if self.found.needle is not None:
                self._search(self.found.needle)
            self._status()

    def _want(self, op: str | tuple[str, int]) -> None:
        """Read ``op`` on the worker now, or once the read in flight is done (only the newest wish waits)."""
        if self._busy:
            self._wanted = op
            return
        if self.window is None:
            return
        self._busy = True
        assert isinstance(self.source, RunRecord)
        self._read(self.window, op, self.generation, self.source)

    @work(thread=True, exit_on_error=False, group="log-read")
    def _read(self, window: PastCapWindow, op: str | tuple[str, int], generation: int, record: RunRecord) -> None:
        if isinstance(op, tuple):
            page = window.around(op[1])
        else:
            page = {"tail": window.tail, "older": window.older, "newer": window.newer, "follow": window.follow}[op]()
        self.post_message(PageRead(page, generation, log_choices(record)))

    def on_page_read(self, message: PageRead) -> None:
        self._busy = False
        if message.choices != self.choices:
            self.choices = message.choices
            if self.choice not in self.choices and self.choices:  # no such log (yet): the first there is
                self.choice = self.choices[0]
                self._wanted = None
                self._open()
                return
            self._head()
            if isinstance(self.source, RunRecord):  # "no log yet" was said before the logs were listed
                self.query_one(LogPane).empty = empty_log(self.choice, self.choices, self.source.live)
        if message.generation == self.generation:
            pane = self.query_one(LogPane)
            pane.show(message.page)
            target = self._target
            if target is not None and message.page.offsets and message.page.offsets[0] <= target <= message.page.end:
                self._target = None
                pane.go_to(target)
            self._status()
            self._more()
        if self._wanted is not None:
            op, self._wanted = self._wanted, None
            self._want(op)

    def _more(self) -> None:
        """Near the window's edge: the next chunk that way."""
        pane = self.query_one(LogPane)
        if pane.near_start() and (not pane.pinned or len(pane.page.lines) < pane.rows):
            self._want("older")
        elif pane.near_end() and not pane.pinned:
            self._want("newer")

    def _poll(self) -> None:
        if not self.following:
            return
        if isinstance(self.source, StreamedLog):
            self._show_streamed()
        elif not self._busy:
            self._want("follow")

    # -- what shows ------------------------------------------------------------------
    def _head(self) -> None:
        head = Text.assemble((self.run_id, "bold"), " · ")
        if isinstance(self.source, StreamedLog):
            head.append(f"rank 0 through ssh from {self.source.host}: the newest lines only; ")
            head.append("search covers them", style="yellow")
        else:
            for choice in self.choices:
                name = f" {log_name(choice)} "
                head.append(name, style="b reverse" if choice == self.choice else "")
            if len(self.choices) > 1:
                head.append(" l/L", style="dim")
        head.append(" · ")
        head.append("following" if self.following else "follow off (f)", style="green" if self.following else "dim")
        self.query_one("#log-head", Static).update(head)

    def _status(self) -> None:
        pane = self.query_one(LogPane)
        page = pane.page
        line = Text()
        if isinstance(self.source, StreamedLog):
            line.append(f"{len(page.lines)} lines streamed")
        elif page.size:
            line.append(pane.position())
        if pane.left:
            line.append(f" · column {pane.left + 1}")
        note = page.note
        if note == "no output yet" and isinstance(self.source, RunRecord) and not self.source.live:
            note = "no output"  # an ended run's log will stay empty
        if note:
            line.append(f" · {note}", style="yellow")
        if self.found.needle is not None:
            line.append(" · ")
            line.append(f"/{self.found.needle.text}", style="bold")
            line.append(": " + self.found.count())
        pane.set_search(self.found.needle, self.found.current_offset)
        self.query_one("#log-status", Static).update(line)

    # -- actions (keys in BINDINGS) --------------------------------------------------------
    def action_close(self) -> None:
        box = self.query_one("#log-search", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.query_one(LogPane).focus()
            return
        self.workers.cancel_group(self, "log-search")
        self.dismiss(None)

    def action_follow(self) -> None:
        self.following = not self.following
        if self.following:
            self._to_end()
        self._head()

    def action_log_rank(self, step: int) -> None:
        if isinstance(self.source, StreamedLog):
            self.notify(
                f"Rank 0's log here; any other: gpumon logs {self.run_id} --host {self.source.host} --rank N",
                markup=False,
            )
            return
        if len(self.choices) < 2:
            self.notify("This run has one log" if self.choices else "No log yet", timeout=3, markup=False)
            return
        index = self.choices.index(self.choice) if self.choice in self.choices else 0
        self.choice = self.choices[(index + step) % len(self.choices)]
        self._open()

    def on_log_pane_scrolled(self, message: LogPane.Scrolled) -> None:
        if message.up and self.following:  # as less +F: looking back stops following
            self.following = False
            self._head()
        self._status()
        self._more()

    def action_scroll(self, lines: int) -> None:
        self.query_one(LogPane).scroll_by(lines)

    def action_page(self, pages: int) -> None:
        pane = self.query_one(LogPane)
        pane.scroll_by(pages * max(1, pane.rows - 1))

    def action_start(self) -> None:
        self.following = False
        self._head()
        pane = self.query_one(LogPane)
        pane.pinned = False
        if pane.page.at_start:
            pane.go_to(0)
            self._status()
        else:
            self._target = 0
            self._want(("around", 0))

    def action_end(self) -> None:
        self._to_end()

    def _to_end(self) -> None:
        pane = self.query_one(LogPane)
        pane.pin()
        if not isinstance(self.source, StreamedLog):
            self._want("follow")  # what was appended since the last read too (or the tail, when far behind)
        self._status()

    def action_wrap(self) -> None:
        pane = self.query_one(LogPane)
        pane.set_wrap(not pane.wrap)
        self._status()

    def action_sideways(self, halves: int) -> None:
        """``halves`` half screens right (left when negative); FAR: as far as the lines go."""
        pane = self.query_one(LogPane)
        if pane.wrap:
            self.notify("Lines wrap: w chops them, then ← → scroll sideways", timeout=3, markup=False)
            return
        pane.sideways(halves * max(1, pane.columns // 2))
        self._status()
