"""The Runs view: the run list (run_table.py) over the selected run's detail (run_detail.py).

The feeds' reader thread (tui/reader.py, shared with the Alerts view) reads the state dir every second, shown or not,
and 4 times a second while it shows a live run (``RunsMonitor.refresh``, the pid map, the selected log); it posts one
``RunsRefreshed`` when what it read changed, which the app also hands on as the runs feed; the event loop never
touches run files. Launch and stop run in thread workers too; both ask first (n opens the form; T stop, K kill).
With a fleet, other hosts' runs are rows too, read and acted on through ssh (remote.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.events import Key, Resize
from textual.widgets import DataTable, Input
from textual.worker import Worker, WorkerState

from gpumon.core.runs.reading.summary import RunSummary
from gpumon.tui.feeds import ReadFailed, RunsRefreshed
from gpumon.tui.reader import Reader
from gpumon.tui.unseen import DrawnLate
from gpumon.tui.view import AppContext, Command, View
from gpumon.tui.views.runs.compare import MIN_RUNS, ComparedRuns, CompareScreen, Comparison
from gpumon.tui.views.runs.feed import ASK, Ask, Read, RunsFeed
from gpumon.tui.views.runs.launching import Launching
from gpumon.tui.views.runs.live_pace import REFRESH_S, LivePace
from gpumon.tui.views.runs.log_parts import StreamedLog
from gpumon.tui.views.runs.log_screen import LogScreen
from gpumon.tui.views.runs.newest import NewRuns
from gpumon.tui.views.runs.queueing import QUEUE_BINDINGS, Queueing
from gpumon.tui.views.runs.reading import matches
from gpumon.tui.views.runs.remote import RemoteRuns
from gpumon.tui.views.runs.remote_log import RemoteLogChanged
from gpumon.tui.views.runs.run_detail import RunDetail
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.widgets.log_view import LogView
from gpumon.tui.widgets.screens import ChoiceScreen

PAGE = 500  # rows in the table at most: the newest that match the filter


class RunsView(Launching, Queueing, LivePace, View, Vertical):
    """The list over the detail. Owns the runs worker, which also feeds the GPU view's RUN column."""

    NAME = "runs"
    TITLE = "Runs"
    KEYS = "r,alt+r"
    HELP_NOTE = "training runs started by gpumon, newest on top (▲: memory grows per step)"
    BINDINGS = [
        Binding("n", "new_run", "new run", id="new_run", tooltip="new run: a form; enter in a field launches"),
        Binding(
            "T",
            "stop_run(False)",
            "stop",
            id="stop_run",
            tooltip="stop the selected run: SIGTERM, SIGKILL after 10 s (a queued run: cancel it)",
        ),
        Binding("K", "stop_run(True)", "kill", id="kill_run", tooltip="kill the selected run now (SIGKILL)"),
        Binding("l", "log_rank(1)", "next log", id="log_next", tooltip="next log: rank 0, 1, …, torchrun's launcher"),
        Binding("L", "log_rank(-1)", "previous log", show=False, id="log_prev", tooltip="previous log"),
        Binding(
            "slash,f4",
            "filter",
            "filter",
            id="run_filter",
            tooltip="filter runs as you type: words matching id, kind, status, program",
        ),
        Binding("f9", "stop_menu", "kill", show=False, id="run_kill_menu", tooltip="stop or kill the run: pick how"),
        # the log full screen, comparing runs, the loss chart's scale (log_screen.py, compare.py)
        Binding("o", "open_log", "open log", id="log_open", tooltip="the log full screen: / search, f follow, l/L"),
        Binding("space", "mark", "mark", id="run_mark", tooltip="mark / unmark the run for comparison (c)"),
        Binding("c", "compare", "compare", id="run_compare", tooltip="compare the marked runs: loss curves overlaid"),
        Binding("y", "log_scale", "log y", id="loss_log_scale", tooltip="the loss chart's y axis: linear / log"),
    ]
    HELP_SCREENS = (("Runs · full-screen log (o)", LogScreen), ("Runs · comparison (c)", CompareScreen))
    BINDINGS += [  # clone (e): the launch form filled from the selected run
        Binding(
            "e",
            "clone_run",
            "clone",
            id="clone_run",
            tooltip="clone the selected run into the launch form: its kind, program, args and options, to edit",
        ),
    ]
    BINDINGS += QUEUE_BINDINGS  # + / - / S on a queued run (queueing.py); T cancels one

    def __init__(self, context: AppContext) -> None:
        super().__init__(id="runs")
        self.context = context
        self.store = context.store
        self.summaries: dict[str, RunSummary] = {}
        self.visible_gpus: int | None = None
        self.selected_id: str | None = None
        self.log_choice: int | None = 0
        self.log_choices: tuple[int | None, ...] = ()
        self._listed: list[RunSummary] | None = None
        self.detail: RunSummary | None = None  # the selected run with its series
        self.filter = ""
        self._live = 0
        self._stale = False
        self._built = False  # rows built once (the first list, shown or not)
        self._disk: str | None = None
        self._select_next: str | None = None
        self.feed = RunsFeed(context)
        self._reader: Reader[Ask, Read] = Reader(
            REFRESH_S, self.feed.read, self.feed.fingerprint, self._post, self._read_failed, ASK
        )
        self.remote = RemoteRuns(self, context.fleet)
        self.comparison = Comparison()  # the runs marked (space) and compared (c)
        self.log_scale = False  # the loss charts' y axis is log10 (y)
        self.new_runs = NewRuns()
        self._start_pace()  # live_pace.py

    def compose(self) -> ComposeResult:
        yield RunTable()
        yield Input(
            placeholder="filter: words of the id, kind, status or program (as you type; escape clears)",
            id="run-filter",
        )
        yield RunDetail()

    def on_mount(self) -> None:
        self.query_one("#run-filter").display = False
        self._reader.start()
        self.poll()

    # -- the reader ---------------------------------------------------------------
    def poll(self) -> None:
        """Read the runs now, for the selection as it is now (then each second, on the reader's thread)."""
        summary = self.summaries.get(self.selected_id or "")
        record = summary.record if summary is not None and self.display else None
        self._reader.ask((record, self.log_choice, self.comparison.wanted()))
        self.remote.follow_log(self.selected_id)  # hidden: none

    def hidden(self) -> None:
        self._pace()
        self.poll()  # no log read for nobody

    def _post(self, read: Read) -> None:
        got, compared = read
        self.post_message(got)
        if compared is not None:
            self.post_message(ComparedRuns(compared))

    def _read_failed(self, error: BaseException) -> None:
        self.post_message(ReadFailed(f"Could not read runs: {error}"))

    def on_read_failed(self, message: ReadFailed) -> None:
        self.notify(message.text, severity="error", timeout=8, markup=False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state in (WorkerState.ERROR, WorkerState.CANCELLED) and event.worker.group == "runs-action":
            self.notify(f"Runs: {event.worker.error}", severity="error", timeout=8, markup=False)

    def on_runs_refreshed(self, message: RunsRefreshed) -> None:
        self.remote.follow_log(self.selected_id)  # (with a fleet this comes each second)
        if message.disk != self._disk:  # said once when it starts, not every second
            self._disk = message.disk
            if message.disk:
                self.notify(message.disk, severity="error", timeout=20, markup=False)
        self.visible_gpus = message.visible_gpus
        self.store = self.store or self.feed.store
        new_detail, self.detail = message.detail is not self.detail, message.detail
        changed = message.summaries is not self._listed  # the monitor hands the same list while nothing changed
        if changed:
            self._listed = message.summaries
            self.summaries = {s.id: s for s in message.summaries}
            self._live = sum(1 for s in message.summaries if s.record.live)
            self._pace()
            self._select_new(self.new_runs.appeared(message.summaries))
        if not self.display and self._built:
            self._stale = True  # hidden: drawn when shown again (showing), not every second for nobody
        elif changed or self._live or self._stale or self.remote.changed() or not self._built:  # a live run's
            # time moves; the first list is built even hidden, so that the first `r` only draws its rows
            first, self._stale = not self._built, False
            self._show(message.summaries)
            if first and not self.display:  # and drawn unseen, if the app drew this view before it came
                self.post_message(DrawnLate(self))
        elif new_detail:  # the selected run's series arrived
            self.query_one(RunDetail).show(self._with_series(self.selected_id))
        tail = message.log
        # a tail read before the user picked another log must not undo the pick (l pressed twice quickly)
        if tail is not None and tail.run_id == self.selected_id and message.asked == self.log_choice:
            # the choice stays the one asked for: a DDP run's launcher.log is there before rank0.log, and the
            # fallback to it must not stick (the pane would stay on torchrun's banner once rank 0 writes)
            self.log_choices = tail.choices
            self.tail_read(tail)

    def showing(self) -> None:
        if self._stale and self._listed is not None:  # the rows as last read (within a second), in the key's frame
            self._stale = False
            self._show(self._listed)

    def shown(self) -> None:
        self._pace()
        self.poll()

    def _select_new(self, run_id: str | None) -> None:
        """A new run (newest.py's rule) is selected now, also while hidden: `d` in any view opens its doctor."""
        summary = self.summaries.get(run_id or "")
        if summary is None or (self.filter and not matches(summary, self.filter)):
            return
        self._select_next = run_id
        self.context.selected_run, self.context.selected_host = run_id, None

    def select_run(self, run_id: str) -> None:
        """Open ``run_id`` (Enter on an alert): selected once the list has it, whatever the filter."""
        self._select_next = run_id
        self.context.selected_run, self.context.selected_host = run_id, None
        if self.filter:
            self.query_one("#run-filter", Input).value = ""
        self._set_filter("")

    # -- showing ------------------------------------------------------------------
    def _show(self, summaries: list[RunSummary]) -> None:
        self._built = True
        table = self.query_one(RunTable)
        matched = [s for s in summaries if matches(s, self.filter)] if self.filter else summaries
        remote = self.remote.listing(self.filter)
        local = self.remote.local_name()
        table.show(
            matched[-PAGE:], self.app.size.width, len(summaries), len(matched), self.filter, self._live, remote, local
        )
        if self._select_next is not None and table.select_run(self._select_next):
            self._select_next = None
        self._selection_changed(table.selected_id())

    def _selection_changed(self, run_id: str | None) -> None:
        detail = self.query_one(RunDetail)
        remote, note = self.remote.get(run_id), self.remote.note(run_id)
        self.remote.follow_log(run_id)  # the one follow: of this run if it is another host's, else none
        if remote is not None or note is not None:  # another host's run, or why a host's runs are missing
            self.context.selected_run = remote.id if remote is not None else None
            self.context.selected_host = remote.host.name if remote is not None else None
            self.selected_id = run_id
            detail.show_remote(remote, note)
            return
        self.context.selected_host = None
        if run_id != self.selected_id:
            self.selected_id = self.context.selected_run = run_id
            self.log_choice, self.log_choices, self._tail = 0, (), None
            detail.show(self._with_series(run_id))
            detail.show_log(None)
            self.poll()
        else:
            self.detail_read()  # live_pace.py: a live run's once a second

    def _with_series(self, run_id: str | None) -> RunSummary | None:
        """The run for the detail: with its series once the worker read them (an ended run's come apart)."""
        if self.detail is not None and self.detail.id == run_id:
            return self.detail
        return self.summaries.get(run_id or "")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if self.display:  # hidden, its rows built unseen: the first row added, not the newest on top (_show picks)
            self._selection_changed(str(event.row_key.value))

    def on_click(self) -> None:
        self.new_runs.touch()

    def on_resize(self, event: Resize) -> None:
        if self.summaries or self.remote.runs:
            self.call_after_refresh(self._show, list(self.summaries.values()))

    def selected(self) -> RunSummary | None:
        return self.summaries.get(self.selected_id or "")

    def action_filter(self) -> None:
        box = self.query_one("#run-filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:  # as you type, as htop filters
        event.stop()
        if event.input.id == "run-filter" and event.input.display:
            self.filter = event.value.strip()
            self._show(self._listed or [])

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._set_filter(event.value.strip())
        self.query_one(RunTable).focus()

    def action_stop_menu(self) -> None:  # htop's F9: the signal picked from a list, then asked as T and K ask
        choices = [("stop", "15 SIGTERM: stop (SIGKILL after 10 s)"), ("kill", " 9 SIGKILL: kill now")]

        def picked(how: str | None) -> None:
            if how is not None:
                self.action_stop_run(how == "kill")

        self.app.push_screen(ChoiceScreen("Stop the run", choices), picked)

    def on_key(self, event: Key) -> None:
        self.new_runs.touch(event.key)  # moving the selection by hand: a new run does not take it for a while
        box = self.query_one("#run-filter", Input)
        if event.key == "escape" and box.has_focus:
            event.stop()
            box.value = ""
            self._set_filter("")
            self.query_one(RunTable).focus()

    def _set_filter(self, text: str) -> None:
        self.filter = text
        self.query_one("#run-filter").display = bool(text)
        self._show(self._listed or [])

    def on_remote_log_changed(self, message: RemoteLogChanged) -> None:
        self.remote.log.changed(message.follow, self.query_one(RunDetail))

    def on_unmount(self) -> None:
        self._reader.stop()
        self.remote.log.stop()  # quitting: no ssh of the follow is left

    def cycle_log(self, step: int) -> None:
        run = self.remote.get(self.selected_id)
        if run is not None:
            self.notify(
                f"Rank 0's log here; any other: gpumon logs {run.id} --host {run.host.name} --rank N", markup=False
            )
            return
        choices = self.log_choices
        if len(choices) < 2:
            self.notify("This run has one log" if choices else "No log yet", timeout=3, markup=False)
            return
        index = choices.index(self.log_choice) if self.log_choice in choices else 0
        self.log_choice = choices[(index + step) % len(choices)]
        self.poll()

    def action_log_rank(self, step: int) -> None:
        self.cycle_log(step)

    def commands(self) -> Iterable[Command]:
        yield Command("Runs: new run…", "Open the launch form (n in the Runs view)", self.action_new_run)
        yield Command(
            "Runs: stop the selected run", "SIGTERM, then SIGKILL after 10 s (T)", lambda: self.action_stop_run(False)
        )
        yield Command("Runs: kill the selected run", "SIGKILL now (K)", lambda: self.action_stop_run(True))
        yield Command("Runs: clone the selected run…", "The launch form, filled from it (e)", self.action_clone_run)
        yield Command("Runs: the selected run's log, full screen", "search, follow, ranks (o)", self.action_open_log)
        yield Command("Runs: compare the marked runs", "loss curves overlaid (space marks, c)", self.action_compare)

    # -- the full-screen log, comparing runs, the loss chart's scale ---------------------
    def action_open_log(self) -> None:
        remote, summary = self.remote.get(self.selected_id), self.selected()
        if remote is not None:  # another host's run: the lines its ssh follow has brought
            pane = self.query_one(RunDetail).query_one("#run-log", LogView)
            self.app.push_screen(LogScreen(StreamedLog(remote.id, remote.host.name, lambda: pane.lines)))
        elif summary is not None:
            self.app.push_screen(LogScreen(summary.record, self.log_choice, follow=summary.record.live))
        else:
            self.notify("Select a run first", severity="warning", timeout=3, markup=False)

    def action_mark(self) -> None:
        run_id = self.selected_id
        if run_id is None or run_id not in self.summaries:
            self.notify(
                "Only this machine's runs can be compared" if run_id else "Select a run first", timeout=3, markup=False
            )
            return
        self.query_one(RunTable).mark(run_id, self.comparison.toggle(run_id))

    def action_compare(self) -> None:
        marked = [run_id for run_id in self.comparison.marked if run_id in self.summaries]
        if len(marked) < MIN_RUNS:
            self.notify(
                f"Mark two or more runs with space to compare them ({len(marked)} marked)", timeout=4, markup=False
            )
            return

        def closed(log: bool | None) -> None:  # the loss chart keeps the scale chosen there
            self.comparison.screen = None
            if log is not None and log != self.log_scale:
                self.action_log_scale()

        self.comparison.screen = CompareScreen(marked, self.log_scale)
        self.app.push_screen(self.comparison.screen, closed)
        self.poll()

    def on_compared_runs(self, message: ComparedRuns) -> None:
        self.comparison.got(message.summaries)

    def action_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        self.query_one(RunDetail).set_log_scale(self.log_scale)
