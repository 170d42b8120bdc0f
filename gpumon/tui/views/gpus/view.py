"""The GPUs view (the monitor): the host panel, a panel per GPU and the process table.

Fed by the app: each sample (``sample``) and each change of the runs' pid
map (``runs_changed``). What it does to the selected process (signals, nice) is in
process_actions.py, its search and filter boxes in boxes.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.events import Resize
from textual.widgets import Static

from gpumon.core.doctor.leak import LeakState
from gpumon.core.format import size
from gpumon.core.gpu.idle import HeldIdle
from gpumon.core.history import History
from gpumon.core.model import GpuDevice, Snapshot
from gpumon.tui.view import AppContext, Command, View
from gpumon.tui.views.gpus.boxes import Boxes, FilterBox, SearchBox
from gpumon.tui.views.gpus.gpu_list import GpuList, no_gpu_text
from gpumon.tui.views.gpus.process_actions import ProcessActions
from gpumon.tui.views.gpus.settings import Panels, SettingsScreen, gpus_settings
from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel
from gpumon.tui.widgets.process_table import SORT_KEYS, ProcessTable
from gpumon.tui.widgets.render import short_run_id
from gpumon.tui.widgets.screens import ChoiceScreen


def gpu_warning(
    device: GpuDevice, run_pids: dict[int, str], leaks: dict[str, LeakState], idle: Mapping[int, HeldIdle] = {}
) -> tuple[str, str] | None:
    """(level, note) when a process on ``device`` belongs to a live run whose memory warns (the worst run wins),
    else when one holds the GPU idle."""
    found = {run_pids[p.pid] for p in device.processes if p.pid in run_pids and run_pids[p.pid] in leaks}
    if not found:
        held = [idle[p.pid] for p in device.processes if p.pid in idle and p.pid in run_pids]
        if not held:
            return None
        first = held[0]
        return "growing", f"⏸ run {short_run_id(run_pids[first.pid])}: GPU held idle for {first.idle_for()}"
    run_id = max(sorted(found), key=lambda r: (leaks[r].state == "leak", leaks[r].slope))
    state = leaks[run_id]
    what = "leak" if state.state == "leak" else "growing"
    return state.state, f"▲ run {short_run_id(run_id)}: memory {what} +{size(state.slope)}/it"


class GpusView(Boxes, ProcessActions, View, Vertical):
    NAME = "gpus"
    TITLE = "GPUs"
    KEYS = "g,alt+g"
    HELP_NOTE = (
        "the live monitor; tab: GPU list / processes (RUN: the gpumon run of a process). UTIL is the time any kernel"
        " ran (one tiny kernel reads 100%); SM active, occupancy, tensor, DRAM (NVML GPM, Hopper and later) say how"
        " much of the GPU ran: cycle-based, they skew while clocks change"
    )
    HELP_WIDGETS = (GpuList,)
    BINDINGS = [
        Binding("left,left_square_bracket", "gpu(-1)", "prev GPU", show=False, id="gpu_prev", tooltip="previous GPU"),
        Binding("right,right_square_bracket", "gpu(1)", "next GPU", show=False, id="gpu_next", tooltip="next GPU"),
        *(
            Binding(str(i), f"select_gpu({i})", f"GPU {i}", show=False, id=f"gpu_{i}", tooltip="select GPU by index")
            for i in range(10)
        ),
        Binding("s", "sort", "sort", id="sort", tooltip="sort the processes by the next column (or click a header)"),
        Binding("R", "reverse", "reverse", show=False, id="reverse", tooltip="reverse the sort"),
        Binding(
            "less_than_sign",
            "sort_step(-1)",
            "sort ←",
            show=False,
            id="sort_prev",
            tooltip="sort by the column to the left",
        ),
        Binding(
            "greater_than_sign",
            "sort_step(1)",
            "sort →",
            show=False,
            id="sort_next",
            tooltip="sort by the column to the right",
        ),
        Binding("a", "toggle_all", "all GPUs", id="all_gpus", tooltip="processes of all GPUs / of the selected GPU"),
        Binding(
            "f3",
            "search",
            "search",
            show=False,
            id="process_search",
            tooltip="find a process by words of its PID, user or command as you type; F3 again: the next one",
        ),
        Binding(
            "slash,f4",
            "filter",
            "filter",
            id="process_filter",
            tooltip="filter the processes by words of their PID, user or command, as you type",
        ),
        Binding(
            "p,f5",
            "tree",
            "tree",
            show=False,
            id="process_tree",
            tooltip="show each process under its parent processes (on/off)",
        ),
        Binding("f6", "sort_menu", "sort by", show=False, id="sort_menu", tooltip="pick the column to sort by"),
        Binding(
            "f9", "kill_menu", "kill", show=False, id="kill_menu", tooltip="pick a signal for the selected process"
        ),
        Binding("f2", "setup", "setup", show=False, id="setup", tooltip="settings: the refresh interval, the panels"),
        Binding(
            "f7", "nice(-1)", "nice -", show=False, id="nice_down", tooltip="nice the process down (higher priority)"
        ),
        Binding("f8", "nice(1)", "nice +", show=False, id="nice_up", tooltip="nice value up (lower priority)"),
        Binding("c", "compact", "compact", show=False, id="compact", tooltip="one line per GPU (on/off)"),
        Binding("T", "signal('SIGTERM')", "SIGTERM", id="terminate", tooltip="send SIGTERM to the selected process"),
        Binding("K", "signal('SIGKILL')", "SIGKILL", id="kill", tooltip="send SIGKILL to the selected process"),
        Binding("I", "signal('SIGINT')", "SIGINT", show=False, id="interrupt", tooltip="send SIGINT (ctrl+c)"),
    ]

    def __init__(self, context: AppContext) -> None:
        super().__init__(id="body")
        self.context = context
        self.selected: int | None = None
        self.history: History | None = None
        self._indexes: tuple[int, ...] | None = None
        self._pending: Snapshot | None = None

    def on_mount(self) -> None:
        self.query_one(FilterBox).display = False
        self.query_one(SearchBox).display = False
        self.shown()

    def on_resize(self, event: Resize) -> None:
        self.query_one(GpuList).fit(event.size.height, self.has_class("-compact"))

    def on_show(self) -> None:  # the switcher showed it (at start, or a view key): after the key's frame
        self.shown()

    def showing(self) -> None:
        """A view key's frame shows the panels and processes as last drawn (a second old at most), as htop shows
        its last frame first: the sample that came while hidden is drawn after that frame (``shown``, on Show).
        Drawing it first redrew every panel line and process row on the key's path (10-25 ms of a 60 ms key)."""

    def shown(self) -> None:
        if self._pending is not None and self.history is not None:
            self.sample(self._pending, self.history)

    def compose(self) -> ComposeResult:
        yield HostPanel()
        yield GpuList(id="gpus")
        yield FilterBox()
        yield SearchBox()
        yield ProcessTable()

    # -- the feeds ---------------------------------------------------------------
    def sample(self, snapshot: Snapshot, history: History) -> None:
        self.history = history
        if not self.is_mounted or not self.children or not self.display:
            # before the panels exist, as the app closes, or while another view shows: drawn on mount or
            # when shown (the history is the sampler's, so the sparklines lose nothing)
            self._pending = snapshot
            return
        self._pending = None
        try:
            self._draw(snapshot, history)
        except NoMatches:  # a sample that lands while the app closes: nothing left to draw on
            self._pending = snapshot

    def _draw(self, snapshot: Snapshot, history: History) -> None:
        indexes = tuple(d.index for d in snapshot.gpu.devices)
        if indexes != self._indexes:
            self._rebuild(snapshot, indexes)
        ctx = self.context
        for dev in snapshot.gpu.devices:
            panel = self.query_one(f"#gpu-{dev.index}", GpuPanel)
            width = panel.history_width()
            panel.show(
                dev,
                history.tail(("gpu", dev.index, "util"), width),
                history.tail(("gpu", dev.index, "mem"), width),
            )
            panel.set_warning(gpu_warning(dev, ctx.run_pids, ctx.run_leaks, ctx.run_idle))
        host = self.query_one(HostPanel)
        width = host.history_width()
        host.show(snapshot.host, history.tail(("host", "cpu"), width), history.tail(("host", "mem"), width))
        self._show_processes()

    def runs_changed(self) -> None:
        self._show_processes()
        snapshot = self.context.snapshot
        if snapshot is None:
            return
        for dev in snapshot.gpu.devices:
            for panel in self.query(f"#gpu-{dev.index}").results(GpuPanel):
                panel.set_warning(
                    gpu_warning(dev, self.context.run_pids, self.context.run_leaks, self.context.run_idle)
                )

    def _rebuild(self, snapshot: Snapshot, indexes: tuple[int, ...]) -> None:
        gpus = self.query_one(GpuList)
        gpus.remove_children()
        self._indexes = indexes
        if not snapshot.gpu.devices:
            gpus.mount(Static(no_gpu_text(snapshot.gpu.reason), id="no-gpu"))
            self.selected = None
            return
        panels = [GpuPanel(d.index, snapshot.gpu.simulated) for d in snapshot.gpu.devices]
        for panel in panels:
            panel.compact = self.has_class("-compact")
        gpus.mount_all(panels)
        if self.selected not in self._indexes:
            self.selected = self._indexes[0]
        self._mark_selected()
        gpus.call_after_refresh(gpus.say_hidden)

    def _mark_selected(self) -> None:
        for panel in self.query(GpuPanel):
            panel.set_class(panel.index == self.selected, "-selected")
        for selected in self.query(f"#gpu-{self.selected}"):
            selected.scroll_visible(animate=False)

    def _show_processes(self) -> None:
        snapshot, ctx = self.context.snapshot, self.context
        if snapshot is not None:
            table = self.query_one(ProcessTable)
            table.show(snapshot.gpu.devices, self.selected, ctx.run_pids, ctx.run_ranks, ctx.run_idle)

    # -- selection ---------------------------------------------------------------
    def select(self, index: int) -> None:
        if not self._indexes or index not in self._indexes:
            self.notify(f"No GPU {index} on this machine", severity="warning", timeout=3, markup=False)
            return
        self.selected = index
        self._mark_selected()
        self._show_processes()

    def action_select_gpu(self, index: int) -> None:
        self.select(index)

    def action_gpu(self, step: int) -> None:
        if not self._indexes:
            return
        position = self._indexes.index(self.selected) if self.selected in self._indexes else 0
        self.select(self._indexes[(position + step) % len(self._indexes)])

    def on_gpu_list_step(self, message: GpuList.Step) -> None:
        self.action_gpu(message.step)

    def on_gpu_panel_selected(self, message: GpuPanel.Selected) -> None:
        self.select(message.index)

    # -- the process table ---------------------------------------------------------
    def action_sort(self) -> None:
        self.query_one(ProcessTable).cycle_sort()

    def action_reverse(self) -> None:
        self.query_one(ProcessTable).reverse_sort()

    def action_sort_step(self, step: int) -> None:
        self.query_one(ProcessTable).step_sort(step)

    def action_sort_menu(self) -> None:
        table = self.query_one(ProcessTable)
        choices = [(key, key) for key in SORT_KEYS]

        def picked(key: str | None) -> None:
            if key is not None:
                table.sort_by(key)

        self.app.push_screen(ChoiceScreen("Sort by", choices, table.sort_key), picked)

    def action_tree(self) -> None:
        self.query_one(ProcessTable).toggle_tree()

    def action_compact(self) -> None:
        compact = not self.has_class("-compact")
        self.set_class(compact, "-compact")
        self.query_one(GpuList).fit(self.size.height, compact)
        for panel in self.query(GpuPanel):
            panel.set_compact(compact)
        self.query_one(GpuList).border_title = "GPUs" if compact else None
        self._mark_selected()

    def action_setup(self) -> None:
        """F2, htop's Setup: the settings in effect, where each comes from; the interval and the panels change live."""
        table, app = self.query_one(ProcessTable), self.app
        panels = Panels(table, lambda: self.has_class("-compact"), self.action_compact, self.action_toggle_all)
        sampler = app.sampler  # type: ignore[attr-defined]
        app.push_screen(SettingsScreen(gpus_settings(panels, sampler, self.context.readonly, app.keymap)))  # type: ignore[attr-defined]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While a box has the focus, the footer shows its own keys (what enter and escape do there), not the view's
        (typed, they go into the box); F3 stays: in the search box it finds the next match."""
        return action == "search" or not self._box_focused()

    def action_toggle_all(self) -> None:
        table = self.query_one(ProcessTable)
        table.show_all = not table.show_all
        self._show_processes()

    def commands(self) -> Iterable[Command]:
        yield Command(
            "Processes: all GPUs / selected GPU", "Toggle the process table's scope (a)", self.action_toggle_all
        )
        table = self.query_one(ProcessTable)
        for key in SORT_KEYS:
            yield Command(
                f"Processes: sort by {key}", f"Sort the process table by {key}", lambda k=key: table.sort_by(k)
            )
        for index in self._indexes or ():
            yield Command(f"Select GPU {index}", f"Show GPU {index}'s processes", lambda i=index: self.select(i))
