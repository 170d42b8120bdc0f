"""The GPUs view (the monitor): the host panel, a panel per GPU and the process table.

Fed by the app: each sample (``sample``) and each change of the runs' pid
map (``runs_changed``). Signals go to the selected process on keys that mean
nothing else anywhere: T SIGTERM, K SIGKILL, I SIGINT, each confirmed.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.events import Key, Resize
from textual.widgets import Input, Static

from gpumon.core.doctor.leak import LeakState
from gpumon.core.format import size
from gpumon.core.gpu.idle import HeldIdle
from gpumon.core.history import History
from gpumon.core.model import GpuDevice, Snapshot
from gpumon.core.signals import send_signal
from gpumon.tui.view import SIGNALS_OFF, AppContext, Command, View
from gpumon.tui.views.gpus.gpu_list import GpuList, no_gpu_text
from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel
from gpumon.tui.widgets.process_table import SORT_KEYS, ProcessTable
from gpumon.tui.widgets.render import short_run_id
from gpumon.tui.widgets.screens import ChoiceScreen, ask_signal

# htop's F9 list, the signals a person sends to a training process, by number as htop shows them
KILL_MENU = [
    (sig.name, f"{int(sig):>2} {sig.name}")
    for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP, signal.SIGSTOP, signal.SIGCONT)
] + [(s.name, f"{int(s):>2} {s.name}") for s in (signal.SIGUSR1, signal.SIGUSR2)]


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


class GpusView(View, Vertical):
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
        self.query_one("#process-filter").display = False
        self.query_one("#process-search").display = False
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
        yield Input(
            placeholder="filter processes: words of the PID, user or command (as you type; escape clears)",
            id="process-filter",
            select_on_focus=False,  # the filter shown again: typing adds words
        )
        yield Input(
            placeholder="search: words of the PID, user or command (F3: next; escape ends)", id="process-search"
        )
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

    def action_filter(self) -> None:
        box = self.query_one("#process-filter", Input)
        box.value = self.query_one(ProcessTable).filter_text
        box.display = True
        box.focus()
        box.cursor_position = len(box.value)

    def action_search(self) -> None:
        box = self.query_one("#process-search", Input)
        if box.display and box.value.strip():  # F3 again, as in htop: the next match
            self._find(box.value, after=True)
            return
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:  # both boxes act as you type, as in htop
        event.stop()
        if event.input.id == "process-filter":
            self.query_one(ProcessTable).set_filter(event.value)
        elif event.input.id == "process-search" and event.value.strip():
            self._find(event.value, after=False)

    def _find(self, text: str, after: bool) -> None:
        box = self.query_one("#process-search", Input)
        found = self.query_one(ProcessTable).find(text.lower().split(), after)
        box.set_class(not found, "-no-match")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "process-search":
            self._find(event.value, after=True)
            return
        self._set_filter(event.value)

    def on_key(self, event: Key) -> None:
        if event.key != "escape":
            return
        box = self.query_one("#process-filter", Input)
        search = self.query_one("#process-search", Input)
        if box.has_focus:
            event.stop()
            box.value = ""
            self._set_filter("")
        elif search.has_focus:
            event.stop()
            search.value = ""
            search.display = False
            self.query_one(ProcessTable).focus()

    def _set_filter(self, text: str) -> None:
        table = self.query_one(ProcessTable)
        table.set_filter(text)
        self.query_one("#process-filter").display = False  # the table's title shows the filter
        table.focus()

    def action_sort_menu(self) -> None:
        table = self.query_one(ProcessTable)
        choices = [(key, key) for key in SORT_KEYS]

        def picked(key: str | None) -> None:
            if key is not None:
                table.sort_by(key)

        self.app.push_screen(ChoiceScreen("Sort by", choices, table.sort_key), picked)

    def action_kill_menu(self) -> None:
        if self.refused(SIGNALS_OFF):
            return
        if self.query_one(ProcessTable).selected() is None:
            self.action_signal("SIGTERM")  # says why nothing can be signalled
            return

        def picked(name: str | None) -> None:
            if name is not None:
                self.action_signal(name)

        self.app.push_screen(ChoiceScreen("Send signal", KILL_MENU, "SIGTERM"), picked)

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

    def action_toggle_all(self) -> None:
        table = self.query_one(ProcessTable)
        table.show_all = not table.show_all
        self._show_processes()

    def action_signal(self, name: str) -> None:
        if self.refused(SIGNALS_OFF):
            return
        table = self.query_one(ProcessTable)
        proc = table.selected()
        if proc is None:
            parent = table.tree_mode and table.selected_key() is not None  # a parent row of the tree
            what = "Signals go to GPU processes: select one, not a parent" if parent else "Select a process first"
            self.notify(f"{what} (tab to the process table)", severity="warning", markup=False)
            return
        sig = signal.Signals[name]
        if proc.simulated:  # never signalled: say so now, not after a question whose answer changes nothing
            self.notify(send_signal(proc, sig).message, severity="warning", timeout=6, markup=False)
            return

        def send() -> None:
            outcome = send_signal(proc, sig)
            self.notify(outcome.message, severity="information" if outcome.ok else "error", timeout=6, markup=False)

        ask_signal(self.app, proc, name, send)

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
