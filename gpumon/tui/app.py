"""The gpumon Textual app: lays out the panels and feeds them each new sample."""

from __future__ import annotations

import signal
from collections.abc import Iterable

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.events import Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from gpumon import __version__
from gpumon.core.model import GpuSample, Snapshot
from gpumon.core.sampler import Sampler
from gpumon.core.signals import send_signal
from gpumon.tui.panels import GpuPanel, HostPanel
from gpumon.tui.processes import SORT_KEYS, ProcessTable
from gpumon.tui.screens import ConfirmScreen, HelpScreen

WIDE = 160  # columns from which GPU panels sit two abreast


class SampleReady(Message):
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        super().__init__()


class GpuList(VerticalScroll):
    """The GPU panels; up/down move the selection while it has focus."""

    BINDINGS = [
        Binding("up,k", "app.gpu(-1)", "prev GPU", show=False, id="gpu_up"),
        Binding("down,j", "app.gpu(1)", "next GPU", show=False, id="gpu_down"),
    ]
    can_focus = True


def top_bar_text(gpu: GpuSample, hostname: str, interval: float, error: str | None = None) -> Text:
    text = Text.assemble(("gpumon ", "bold"), (__version__, "dim"), " · ", (hostname, "bold"), " · ")
    text.append(f"{gpu.source}")
    if gpu.driver and not gpu.simulated:
        text.append(f" driver {gpu.driver}", style="dim")
    text.append(f" · {len(gpu.devices)} GPU{'s' if len(gpu.devices) != 1 else ''} · every {interval:g}s")
    if gpu.simulated:
        text.append("  SIMULATED ", style="bold black on yellow")
    if gpu.reason and gpu.devices:
        text.append(f"  {gpu.reason}", style="bold red")
    if error:
        text.append(f"  {error}", style="bold red")
    return text


def no_gpu_text(reason: str | None) -> Text:
    return Text.assemble(
        ("No GPU shown\n", "bold"),
        (f"{reason or 'no GPU source answered'}\n", "yellow"),
        ("The host panel is live. For a demo with simulated GPUs: ", "dim"),
        ("gpumon --simulate 2", "bold"),
    )


class GpumonApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "gpumon"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("q", "quit", "quit", id="quit"),
        Binding("question_mark", "help", "help", id="help"),
        Binding("left,left_square_bracket", "gpu(-1)", "prev GPU", show=False, id="gpu_prev"),
        Binding("right,right_square_bracket", "gpu(1)", "next GPU", show=False, id="gpu_next"),
        *(Binding(str(i), f"select_gpu({i})", f"GPU {i}", show=False, id=f"gpu_{i}") for i in range(10)),
        Binding("s", "sort", "sort", id="sort"),
        Binding("r", "reverse", "reverse", show=False, id="reverse"),
        Binding("a", "toggle_all", "all GPUs", id="all_gpus"),
        Binding("t", "signal('SIGTERM')", "SIGTERM", id="terminate"),
        Binding("K", "signal('SIGKILL')", "SIGKILL", id="kill"),
    ]

    def __init__(self, sampler: Sampler, readonly: bool = False, keymap: dict[str, str] | None = None) -> None:
        super().__init__()
        if keymap:
            self.set_keymap(keymap)
        self.sampler = sampler
        self.readonly = readonly
        self.selected: int | None = None
        self.snapshot: Snapshot | None = None
        self._indexes: tuple[int, ...] | None = None
        self._top_bar: Text | None = None

    # -- layout ---------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(Text("gpumon  sampling…"), id="top-bar")
        with Vertical(id="body"):
            yield HostPanel()
            yield GpuList(id="gpus")
            yield ProcessTable()
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
                self.query_one("#top-bar", Static).update(bar, layout=False)
            for dev in snap.gpu.devices:
                panel = self.query_one(f"#gpu-{dev.index}", GpuPanel)
                width = panel.history_width()
                panel.show(
                    dev,
                    history.tail(("gpu", dev.index, "util"), width),
                    history.tail(("gpu", dev.index, "mem"), width),
                )
            host = self.query_one(HostPanel)
            width = host.history_width()
            host.show(snap.host, history.tail(("host", "cpu"), width), history.tail(("host", "mem"), width))
            self.query_one(ProcessTable).show(snap.gpu.devices, self.selected)

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
        if self.snapshot is not None:
            self.query_one(ProcessTable).show(self.snapshot.gpu.devices, self.selected)

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
        if self.snapshot is not None:
            table.show(self.snapshot.gpu.devices, self.selected)

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
        yield SystemCommand(
            "Processes: all GPUs / selected GPU", "Toggle the process table's scope", self.action_toggle_all
        )
        for key in SORT_KEYS:
            yield SystemCommand(
                f"Processes: sort by {key}", f"Sort the process table by {key}", lambda k=key: self._sort_by(k)
            )
        for index in self._indexes or ():
            yield SystemCommand(f"Select GPU {index}", f"Show GPU {index}'s processes", lambda i=index: self.select(i))

    def _sort_by(self, key: str) -> None:
        self.query_one(ProcessTable).sort_by(key)
