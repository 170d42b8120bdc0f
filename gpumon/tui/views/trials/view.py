"""The Trials view: the experiment list, the experiment's header, its trial table and the selected trial.

A thread worker reads the state dir every second while the view shows
(``ExperimentsMonitor``: Tune event files only, incrementally) and posts one
``TrialsRefreshed`` with immutable snapshots; the event loop only diffs them
into the widgets. Stop requests are written by a thread worker too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.events import Resize
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widget import Widget
from textual.widgets import DataTable, Static
from textual.worker import Worker, WorkerState

from gpumon.core.fleet.trial_gpu import trial_gpu_memory
from gpumon.core.runs.reading.experiments import ExperimentInfo, ExperimentsMonitor, ExperimentSnapshot, TrialRow
from gpumon.core.runs.record.store import RunStore
from gpumon.tui.view import AppContext, Command, View
from gpumon.tui.views.trials.experiment_table import ExperimentTable
from gpumon.tui.views.trials.stopping import search_stop_question, trial_stop_question, write_stop_request
from gpumon.tui.views.trials.trial_cells import gpu_memory
from gpumon.tui.views.trials.trial_detail import EMPTY, TrialDetail, chart_metric, header_text
from gpumon.tui.views.trials.trial_table import TrialTable
from gpumon.tui.widgets.screens import ConfirmScreen

REFRESH_S = 1.0
READONLY = "no trial or experiment is stopped"


class TrialsRefreshed(Message):
    def __init__(self, infos: list[ExperimentInfo], snapshot: ExperimentSnapshot | None) -> None:
        self.infos = infos
        self.snapshot = snapshot
        super().__init__()


class TrialActionDone(Message):
    def __init__(self, text: str, severity: SeverityLevel) -> None:
        self.text = text
        self.severity = severity
        super().__init__()


class TrialsView(View, Vertical):
    NAME = "trials"
    TITLE = "Trials"
    KEYS = "t,alt+t"
    HELP_NOTE = "Ray Tune experiments (★: the best trial by the header's scope)"
    BINDINGS = [
        Binding("x,f9", "stop_trial", "stop", id="stop_trial", tooltip="stop the selected trial (at its next result)"),
        Binding("X", "stop_experiment", "stop all", id="stop_experiment", tooltip="stop the whole search"),
        Binding(
            "f,f4", "trial_filter", "filter", id="trial_filter", tooltip="show all trials, then only RUNNING, ERROR, …"
        ),
        Binding(
            "e", "experiment(1)", "exp.", id="experiment_next", tooltip="next experiment (or select it in the list)"
        ),
        Binding(
            "E",
            "experiment(-1)",
            "previous experiment",
            show=False,
            id="experiment_prev",
            tooltip="previous experiment",
        ),
        Binding("m", "trial_metric", "metric", show=False, id="trial_metric", tooltip="the metric the curve shows"),
        Binding("s", "trial_sort", "sort", id="trial_sort", tooltip="sort by the next column (or click a header)"),
        Binding("R", "trial_reverse", "reverse", show=False, id="trial_reverse", tooltip="reverse the sort"),
        Binding(
            "less_than_sign",
            "trial_sort_step(-1)",
            "sort ←",
            show=False,
            id="trial_sort_prev",
            tooltip="sort by the column to the left",
        ),
        Binding(
            "greater_than_sign",
            "trial_sort_step(1)",
            "sort →",
            show=False,
            id="trial_sort_next",
            tooltip="sort by the column to the right",
        ),
    ]

    def __init__(self, context: AppContext) -> None:
        super().__init__(id="trials")
        self.context = context
        self.store = context.store
        self.polling = True  # the benchmark feeds the view itself
        self.infos: list[ExperimentInfo] = []
        self.snapshot: ExperimentSnapshot | None = None
        self.run_id: str | None = None  # the experiment shown; None: the newest
        self.trial_id: str | None = None
        self.metric: str | None = None  # the chart's metric, chosen with m
        self._monitor: ExperimentsMonitor | None = None
        self._busy = False
        self._again = False
        self._failed: str | None = None
        self._header: Text | None = None

    def compose(self) -> ComposeResult:
        yield Static(EMPTY, id="trials-empty")
        yield ExperimentTable()
        yield Static(Text("Reading experiments…", style="dim"), id="trials-header")
        yield TrialTable()
        yield TrialDetail(id="trial-detail")

    def on_mount(self) -> None:
        self.query_one("#trials-empty").display = False
        self._ticks = self.set_interval(REFRESH_S, self._tick, pause=True)  # while shown (shown, hidden)

    @property
    def table(self) -> TrialTable:
        return self.query_one(TrialTable)

    # -- the worker -------------------------------------------------------------
    def hidden(self) -> None:
        self._ticks.pause()  # hidden: no tick at all, not a tick that does nothing

    def shown(self) -> None:
        self._ticks.resume()
        self.poll()

    def ahead(self) -> None:
        self.poll()

    def focus_target(self) -> Widget | None:
        return self.table if self.table.display else None  # the trials, not the experiment list above them

    def _tick(self) -> None:
        if self.polling and self.display:  # hidden: read nothing
            self.poll()

    def poll(self) -> None:
        """Read the experiments now (or right after the read in flight)."""
        if not self.polling:
            return
        if self._busy:
            self._again = True
            return
        self._busy = True
        self._read(self.run_id, self.trial_id)

    @work(thread=True, exit_on_error=False, group="trials-feed", description="read experiments")
    def _read(self, run_id: str | None, trial_id: str | None) -> None:
        if self._monitor is None:
            self._monitor = ExperimentsMonitor(self.store or RunStore())
        infos = self._monitor.refresh()
        ids = [info.run_id for info in infos]
        target = run_id if run_id in ids else ids[0] if ids else None
        snapshot = self._monitor.snapshot(target, trial_id) if target is not None else None
        self.post_message(TrialsRefreshed(infos, snapshot))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state not in (WorkerState.ERROR, WorkerState.CANCELLED):
            return
        error = str(event.worker.error)
        if event.worker.group == "trials-action":
            self.notify(f"Trials: {error}", severity="error", timeout=8, markup=False)
        elif event.worker.group == "trials-feed":
            self._busy = False
            if error != self._failed:  # say it once, not every second
                self._failed = error
                self.notify(f"Could not read experiments: {error}", severity="error", timeout=8, markup=False)

    def on_trials_refreshed(self, message: TrialsRefreshed) -> None:
        self._busy = False
        self.apply(message.infos, message.snapshot)
        if self._again:
            self._again = False
            self.poll()

    # -- showing ------------------------------------------------------------------
    def apply(self, infos: list[ExperimentInfo], snapshot: ExperimentSnapshot | None) -> None:
        """Show what the worker read: diffed into the tables, the header and the detail."""
        with self.app.batch_update():
            self.infos = infos
            empty = self.query_one("#trials-empty")
            if empty.display != (not infos):
                empty.display = not infos
                for widget in (ExperimentTable, TrialTable, TrialDetail):
                    self.query_one(widget).display = bool(infos)
                self.query_one("#trials-header").display = bool(infos)
                target = self.focus_target()
                if infos and self.display and self.screen.focused is None and target is not None:
                    self.screen.set_focus(target)  # opened before its data: its keys act from the rows' first frame
            width = self.app.size.width
            if self.run_id not in {info.run_id for info in infos}:  # none chosen yet, or it is gone
                self.run_id = snapshot.info.run_id if snapshot is not None else None
            self.query_one(ExperimentTable).show(infos, width, self.run_id)
            if snapshot is None or snapshot.info.run_id != self.run_id:
                return  # the selection moved while the worker read: its answer is on the way
            self.snapshot = snapshot
            header = header_text(snapshot)
            if header != self._header:
                self._header = header
                self.query_one("#trials-header", Static).update(header)
            table = self.table
            table.show(snapshot, self.trial_memory(snapshot), width)
            self.selection_changed(table.selected_id())

    def selection_changed(self, trial_id: str | None) -> None:
        snap = self.snapshot
        if snap is None:
            return
        if trial_id != self.trial_id:
            self.trial_id = trial_id
            self.poll()  # fetch its curves
        row = snap.by_id.get(trial_id or "")
        curves = snap.curves if snap.curves is not None and snap.curves.trial_id == trial_id else None
        gpu = self.trial_memory(snap, row).get(row.id) if row and row.pid else None
        self.query_one(TrialDetail).show(row, snap, curves, chart_metric(snap, self.metric), gpu)

    def trial_memory(self, snap: ExperimentSnapshot, row: TrialRow | None = None) -> dict[str, int]:
        """Trial id -> its process's GPU memory, on this machine or (with a fleet) on its own node."""
        fleet = self.context.fleet
        state = fleet.state() if fleet is not None else ()
        hosts = getattr(state, "hosts", state)  # a FleetState, or a RayFleet's tuple of host states
        return trial_gpu_memory((row,) if row else snap.trials, gpu_memory(self.context.snapshot), hosts)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        key = str(event.row_key.value)
        if event.data_table is self.table:
            self.selection_changed(key)
        elif key != self.run_id:
            self.run_id, self.trial_id = key, None
            self.poll()

    def on_resize(self, event: Resize) -> None:
        if self.snapshot is not None:
            self.call_after_refresh(self.apply, self.infos, self.snapshot)

    def selected(self) -> TrialRow | None:
        return self.snapshot.by_id.get(self.trial_id or "") if self.snapshot else None

    def action_experiment(self, step: int) -> None:
        if len(self.infos) < 2:
            self.notify("This is the only experiment" if self.infos else "No experiment yet", timeout=3, markup=False)
            return
        self.query_one(ExperimentTable).cycle(step)

    def action_trial_metric(self) -> None:
        snap = self.snapshot
        if snap is None or len(snap.metrics) < 2:
            self.notify("This experiment reports one metric" if snap else "No experiment yet", timeout=3, markup=False)
            return
        current = chart_metric(snap, self.metric)
        index = snap.metrics.index(current) if current in snap.metrics else -1
        self.metric = snap.metrics[(index + 1) % len(snap.metrics)]
        self.selection_changed(self.trial_id)

    # -- stop requests ------------------------------------------------------------------
    @work(thread=True, exit_on_error=False, group="trials-action")
    def request_stop(self, run_dir: Path, run_id: str, trial_id: str | None) -> None:
        self.post_message(TrialActionDone(*write_stop_request(run_dir, run_id, trial_id)))

    def on_trial_action_done(self, message: TrialActionDone) -> None:
        self.notify(message.text, severity=message.severity, timeout=6, markup=False)
        self.poll()

    # -- actions (keys in BINDINGS) -------------------------------------------------
    def action_trial_sort(self) -> None:
        self.table.cycle_sort()

    def action_trial_reverse(self) -> None:
        self.table.reverse_sort()

    def action_trial_sort_step(self, step: int) -> None:
        self.table.step_sort(step)

    def action_trial_filter(self) -> None:
        status = self.table.cycle_filter()
        self.selection_changed(self.table.selected_id())  # the rows were rebuilt
        self.notify(f"Showing {status or 'all'} trials", timeout=2, markup=False)

    def action_stop_trial(self) -> None:
        if not self.refused(READONLY):
            self._ask(*trial_stop_question(self.snapshot, self.selected()))

    def action_stop_experiment(self) -> None:
        if not self.refused(READONLY):
            self._ask(*search_stop_question(self.snapshot))

    def _ask(self, question: str | None, refusal: str, trial_id: str | None) -> None:
        if question is None or self.snapshot is None:
            self.notify(refusal, severity="warning", timeout=4, markup=False)
            return
        self.app.push_screen(ConfirmScreen(question), self._stop_answer(self.snapshot.info.run_id, trial_id))

    def _stop_answer(self, run_id: str, trial_id: str | None) -> Callable[[bool | None], None]:
        def answered(yes: bool | None) -> None:
            if yes and self.snapshot is not None and self.snapshot.info.run_id == run_id:
                self.request_stop(self.snapshot.info.run_dir, run_id, trial_id)

        return answered

    def commands(self) -> Iterable[Command]:
        yield Command(
            "Trials: stop the selected trial", "Ask Tune to end it at its next result (x)", self.action_stop_trial
        )
        yield Command("Trials: stop the experiment", "Ask Tune to end every trial (X)", self.action_stop_experiment)
        yield Command("Trials: filter by status", "All, then each status in turn (f)", self.action_trial_filter)
