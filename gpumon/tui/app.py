"""The gpumon Textual app: lays out the panels and feeds them each new sample."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Footer, Static

from gpumon.core.doctor.leak import LeakState
from gpumon.core.format import size
from gpumon.core.model import GpuDevice, Snapshot
from gpumon.core.runs.store import RunStore
from gpumon.core.sampler import Sampler
from gpumon.core.signals import send_signal
from gpumon.tui.app_doctor import DoctorActions
from gpumon.tui.app_runs import RunsActions
from gpumon.tui.app_trials import TrialsActions
from gpumon.tui.doctor_view import DoctorView
from gpumon.tui.gpu_view import GpuList, no_gpu_text, top_bar_text
from gpumon.tui.panels import GpuPanel, HostPanel
from gpumon.tui.processes import SORT_KEYS, ProcessTable, short_run_id
from gpumon.tui.run_table import RunTable
from gpumon.tui.runs import RunsRefreshed, RunsView
from gpumon.tui.screens import ConfirmScreen, HelpScreen
from gpumon.tui.trial_table import TrialTable
from gpumon.tui.trials_view import TrialsView
from gpumon.tui.views import VIEW_OF_ACTION, VIEWS, ViewTabs, view_bindings, view_named

__all__ = ["GpuList", "GpumonApp", "no_gpu_text", "top_bar_text"]

WIDE = 160  # columns from which GPU panels sit two abreast


class SampleReady(Message):
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        super().__init__()


def gpu_warning(device: GpuDevice, run_pids: dict[int, str], leaks: dict[str, LeakState]) -> tuple[str, str] | None:
    """(level, note) when a process on ``device`` belongs to a live run whose memory warns; the worst run wins."""
    found = {run_pids[p.pid] for p in device.processes if p.pid in run_pids and run_pids[p.pid] in leaks}
    if not found:
        return None
    run_id = max(sorted(found), key=lambda r: (leaks[r].state == "leak", leaks[r].slope))
    state = leaks[run_id]
    what = "leak" if state.state == "leak" else "growing"
    return state.state, f"▲ run {short_run_id(run_id)}: memory {what} +{size(state.slope)}/it"


class GpumonApp(DoctorActions, TrialsActions, RunsActions):
    CSS_PATH = "app.tcss"
    TITLE = "gpumon"
    ENABLE_COMMAND_PALETTE = True
    # Keys of one view act (and show in the footer) only in that view: see check_action and views.py.
    BINDINGS = [
        Binding("q", "quit", "quit", id="quit"),
        Binding("question_mark", "help", "help", id="help"),
        *view_bindings(("gpus", "runs")),
        # Runs (n and x before the GPUs' K so the Runs footer reads n, x, K, l)
        Binding("n", "new_run", "new run", id="new_run"),
        Binding("x", "stop_run(False)", "stop", id="stop_run"),
        # Trials
        Binding("x", "stop_trial", "stop", id="stop_trial"),
        Binding("X", "stop_experiment", "stop all", id="stop_experiment"),
        Binding("f", "trial_filter", "filter", id="trial_filter"),
        Binding("e", "experiment(1)", "exp.", id="experiment_next"),
        Binding("E", "experiment(-1)", "previous experiment", show=False, id="experiment_prev"),
        Binding("m", "trial_metric", "metric", show=False, id="trial_metric"),
        Binding("s", "trial_sort", "sort", id="trial_sort"),
        Binding("R", "trial_reverse", "reverse", show=False, id="trial_reverse"),
        # GPUs
        Binding("left,left_square_bracket", "gpu(-1)", "prev GPU", show=False, id="gpu_prev"),
        Binding("right,right_square_bracket", "gpu(1)", "next GPU", show=False, id="gpu_next"),
        *(Binding(str(i), f"select_gpu({i})", f"GPU {i}", show=False, id=f"gpu_{i}") for i in range(10)),
        Binding("s", "sort", "sort", id="sort"),
        Binding("R", "reverse", "reverse", show=False, id="reverse"),
        Binding("a", "toggle_all", "all GPUs", id="all_gpus"),
        Binding("t", "signal('SIGTERM')", "SIGTERM", id="terminate"),
        Binding("K", "signal('SIGKILL')", "SIGKILL", id="kill"),
        Binding("K", "stop_run(True)", "kill", id="kill_run"),
        Binding("l", "log_rank(1)", "next log", id="log_next"),
        Binding("L", "log_rank(-1)", "previous log", show=False, id="log_prev"),
        # Last, so that in the GPUs view t stays SIGTERM (F4 opens Trials there); t opens it elsewhere.
        *view_bindings(("trials",)),
        # Doctor (last: in the footer after each view's own keys)
        *view_bindings(("doctor",)),
        Binding("c", "census", "census", id="census"),
    ]

    def __init__(
        self,
        sampler: Sampler,
        readonly: bool = False,
        keymap: dict[str, str] | None = None,
        store: RunStore | None = None,
    ) -> None:
        super().__init__()
        if keymap:
            self.set_keymap(keymap)
        self.sampler = sampler
        self.readonly = readonly
        self.store = store  # None: the state dir ($GPUMON_HOME), opened by the runs worker
        self.view = VIEWS[0].name
        self.selected: int | None = None
        self.snapshot: Snapshot | None = None
        self.run_pids: dict[int, str] = {}  # PID -> run id of live gpumon runs; the runs worker sets it
        self.run_ranks: dict[int, int] = {}  # PID -> rank, for the ranks among them
        self.run_leaks: dict[str, LeakState] = {}  # run id -> memory warning of live runs whose memory warns
        self._feed_pids: dict[int, str] = {}
        self._indexes: tuple[int, ...] | None = None
        self._top_bar: Text | None = None
        self._focus_of_view: dict[str, Widget | None] = {}

    # -- layout ---------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="top-bar"):
            yield Static(Text("gpumon  sampling…"), id="top-info")
            yield ViewTabs(self.view, id="view-tabs")
        with ContentSwitcher(initial=view_named(self.view).widget_id, id="views"):
            with Vertical(id="body"):
                yield HostPanel()
                yield GpuList(id="gpus")
                yield ProcessTable()
            yield RunsView(self.store)
            yield TrialsView(self.store)
            yield DoctorView(self.store)
        yield Footer()

    def on_mount(self) -> None:
        self.sampler.on_sample = self.post_message_from_sampler
        if self.sampler.latest is not None:
            self.apply(self.sampler.latest)

    def post_message_from_sampler(self, snapshot: Snapshot) -> None:
        self.post_message(SampleReady(snapshot))  # thread-safe; never blocks the sampler

    def on_sample_ready(self, message: SampleReady) -> None:
        self.apply(message.snapshot)

    def on_resize(self, event: Resize) -> None:
        self.screen.set_class(event.size.width >= WIDE, "-wide")
        if self.snapshot is not None:
            self.call_after_refresh(self.apply, self.snapshot)  # redraw history to the new widths

    # -- rendering ------------------------------------------------------------
    def apply(self, snap: Snapshot) -> None:
        self.snapshot = snap
        history = self.sampler.history
        indexes = tuple(d.index for d in snap.gpu.devices)
        if indexes != self._indexes:
            self._rebuild(snap, indexes)
        with self.batch_update():
            bar = top_bar_text(snap.gpu, snap.host.hostname, self.sampler.interval, self.sampler.error)
            if bar != self._top_bar:  # an unchanged bar must not cost a layout pass each tick
                self._top_bar = bar
                self.query_one("#top-info", Static).update(bar, layout=False)
            for dev in snap.gpu.devices:
                panel = self.query_one(f"#gpu-{dev.index}", GpuPanel)
                width = panel.history_width()
                panel.show(
                    dev,
                    history.tail(("gpu", dev.index, "util"), width),
                    history.tail(("gpu", dev.index, "mem"), width),
                )
                panel.set_warning(gpu_warning(dev, self.run_pids, self.run_leaks))
            host = self.query_one(HostPanel)
            width = host.history_width()
            host.show(snap.host, history.tail(("host", "cpu"), width), history.tail(("host", "mem"), width))
            self.query_one(ProcessTable).show(snap.gpu.devices, self.selected, self.run_pids, self.run_ranks)

    def _rebuild(self, snap: Snapshot, indexes: tuple[int, ...]) -> None:
        gpus = self.query_one(GpuList)
        gpus.remove_children()
        self._indexes = indexes
        if not snap.gpu.devices:
            gpus.mount(Static(no_gpu_text(snap.gpu.reason), id="no-gpu"))
            self.selected = None
            return
        gpus.mount_all([GpuPanel(d.index, snap.gpu.simulated) for d in snap.gpu.devices])
        if self.selected not in self._indexes:
            self.selected = self._indexes[0]
        self._mark_selected()

    def _mark_selected(self) -> None:
        for panel in self.query(GpuPanel):
            panel.set_class(panel.index == self.selected, "-selected")
        for selected in self.query(f"#gpu-{self.selected}"):
            selected.scroll_visible(animate=False)

    # -- actions --------------------------------------------------------------
    def select(self, index: int) -> None:
        if not self._indexes or index not in self._indexes:
            self.notify(f"No GPU {index} on this machine", severity="warning", timeout=3)
            return
        self.selected = index
        self._mark_selected()
        self._show_processes()

    def _show_processes(self) -> None:
        if self.snapshot is not None:
            self.query_one(ProcessTable).show(self.snapshot.gpu.devices, self.selected, self.run_pids, self.run_ranks)

    def set_run_pids(self, pids: dict[int, str]) -> None:
        """Mark these PIDs' rows in the process table with their run (tests may call it directly)."""
        if pids != self.run_pids:
            self.run_pids = dict(pids)
            self._show_processes()
            self._warn_panels()

    def set_run_leaks(self, leaks: dict[str, LeakState]) -> None:
        """Warn on the GPU panels that hold a process of these runs (tests may call it directly)."""
        if leaks != self.run_leaks:
            self.run_leaks = dict(leaks)
            self._warn_panels()

    def _warn_panels(self) -> None:
        if self.snapshot is None:
            return
        for dev in self.snapshot.gpu.devices:
            for panel in self.query(f"#gpu-{dev.index}").results(GpuPanel):
                panel.set_warning(gpu_warning(dev, self.run_pids, self.run_leaks))

    def on_runs_refreshed(self, message: RunsRefreshed) -> None:
        if message.pids != self._feed_pids:  # only a change: a map set by hand stays until the runs change
            self._feed_pids = message.pids
            self.run_ranks = dict(message.ranks)
            self.set_run_pids(message.pids)
        leaks = {s.id: s.leak for s in message.summaries if s.record.live and s.leak is not None}
        self.set_run_leaks({run_id: state for run_id, state in leaks.items() if state is not None})

    # -- views ----------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        owner = VIEW_OF_ACTION.get(action)
        if owner is not None and owner != self.view:
            return False  # another view's key: inactive and hidden from the footer
        return not (action == "view" and parameters and parameters[0] == self.view)  # the view shown

    def action_view(self, name: str) -> None:
        self.show_view(name)

    def show_view(self, name: str) -> None:
        view = view_named(name)
        if name == self.view:
            return
        self._focus_of_view[self.view] = self.focused
        self.view = name
        self.query_one("#views", ContentSwitcher).current = view.widget_id
        self.query_one(ViewTabs).set_current(name)
        remembered = self._focus_of_view.get(name)
        if remembered is not None and remembered.is_attached:
            remembered.focus()
        elif name == "runs":
            self.query_one(RunTable).focus()
        elif name == "trials":
            self.query_one(TrialTable).focus()
        elif name == "doctor":
            self.doctor_view.focus()
        else:
            self.screen.focus_next()
        self.refresh_bindings()
        if name == "runs":
            self.runs_view.poll()
        elif name == "trials":
            self.trials_view.poll()
        elif name == "doctor":
            self.open_doctor()

    def action_select_gpu(self, index: int) -> None:
        self.select(index)

    def action_gpu(self, step: int) -> None:
        if not self._indexes:
            return
        position = self._indexes.index(self.selected) if self.selected in self._indexes else 0
        self.select(self._indexes[(position + step) % len(self._indexes)])

    def on_gpu_panel_selected(self, message: GpuPanel.Selected) -> None:
        self.select(message.index)

    def action_sort(self) -> None:
        self.query_one(ProcessTable).cycle_sort()

    def action_reverse(self) -> None:
        self.query_one(ProcessTable).reverse_sort()

    def action_toggle_all(self) -> None:
        table = self.query_one(ProcessTable)
        table.show_all = not table.show_all
        self._show_processes()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_signal(self, name: str) -> None:
        if self.readonly:
            self.notify("Read-only mode (--readonly): signals are off", severity="warning")
            return
        proc = self.query_one(ProcessTable).selected()
        if proc is None:
            self.notify("Select a process first (tab to the process table)", severity="warning")
            return
        sig = signal.Signals[name]

        def answered(yes: bool | None) -> None:
            if yes:
                outcome = send_signal(proc, sig)
                self.notify(outcome.message, severity="information" if outcome.ok else "error", timeout=6)

        who = f"{proc.user or 'N/A'}: {proc.command or 'N/A'}"
        self.push_screen(ConfirmScreen(f"Send {name} to PID {proc.pid}?\n{who}"), answered)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Help", "All keys of gpumon", self.action_help)
        for view in VIEWS:
            keys = view.keys.replace(",", " / ")
            yield SystemCommand(f"View: {view.title}", f"Show the {view.title} view ({keys})", self._view_cb(view.name))
        yield SystemCommand("Runs: new run…", "Open the launch form (n in the Runs view)", self.action_new_run)
        yield SystemCommand(
            "Runs: stop the selected run", "SIGTERM, then SIGKILL after 10 s (x)", lambda: self.action_stop_run(False)
        )
        yield SystemCommand("Runs: kill the selected run", "SIGKILL now (K)", lambda: self.action_stop_run(True))
        yield SystemCommand(
            "Doctor: diagnose the selected run", "Memory trend, failure and fix (d)", self._view_cb("doctor")
        )
        yield from self.trial_commands()
        yield SystemCommand(
            "Processes: all GPUs / selected GPU", "Toggle the process table's scope", self.action_toggle_all
        )
        for key in SORT_KEYS:
            yield SystemCommand(
                f"Processes: sort by {key}", f"Sort the process table by {key}", lambda k=key: self._sort_by(k)
            )
        for index in self._indexes or ():
            yield SystemCommand(f"Select GPU {index}", f"Show GPU {index}'s processes", lambda i=index: self.select(i))

    def _view_cb(self, name: str) -> Any:
        return lambda: self.show_view(name)

    def _sort_by(self, key: str) -> None:
        self.query_one(ProcessTable).sort_by(key)
