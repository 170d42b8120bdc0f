"""A fleet host's full GPU view: its host panel, a panel per GPU and its process table, from its snapshots.

The Fleet view hands it each new ``HostState`` while it is open. Signals (T, K) are confirmed, refused
with --readonly, and sent on that host by ``gpumon signal`` through the user's ssh (core/fleet/remote.py),
on a thread: the screen never waits on ssh.
"""

from __future__ import annotations

import signal
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.events import Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static

from gpumon.core.fleet.hosts import HostError, fleet_reach, load_fleet_config
from gpumon.core.fleet.lines import link_words, run_pids
from gpumon.core.fleet.model import HostState
from gpumon.core.fleet.remote import signal_process
from gpumon.core.history import History
from gpumon.core.model import GpuProcess, Snapshot
from gpumon.core.sampler import record
from gpumon.core.signals import SignalOutcome
from gpumon.tui.view import SIGNALS_OFF, AppContext, Refuses
from gpumon.tui.widgets.footer import KeysFooter
from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ask_signal

WIDE_SCREEN = 160  # the app's WIDE (the views cannot import the app)


class SignalDone(Message):
    def __init__(self, outcome: SignalOutcome) -> None:
        self.outcome = outcome
        super().__init__()


def ssh_and_gpumon(fleet: Any) -> tuple[list[str], str | list[str]]:
    """The fleet's ssh argv and remote gpumon command (its ``ssh``/``gpumon``), else the user's own
    (--ssh, $GPUMON_SSH, [fleet] ssh and gpumon, as the links use). Raises HostError for a bad config."""
    ssh = getattr(fleet, "ssh", None)
    gpumon = getattr(fleet, "gpumon", None)
    if ssh and gpumon:
        return list(ssh), gpumon
    argv, command = fleet_reach(None, load_fleet_config(), need_ssh=False)
    return (list(ssh) if ssh else argv), (gpumon or command)


class HostScreen(Refuses, Screen[None]):
    BINDINGS = [
        Binding("escape,backspace", "close", "back to the fleet", id="host_close", tooltip="back to the Fleet view"),
        Binding("T", "signal('SIGTERM')", "SIGTERM", id="remote_terminate", tooltip="SIGTERM to the process (ssh)"),
        Binding("K", "signal('SIGKILL')", "SIGKILL", id="remote_kill", tooltip="SIGKILL to the process (ssh)"),
    ]

    def __init__(self, state: HostState, context: AppContext) -> None:
        super().__init__(classes="host-screen")
        self.state = state
        self.context = context
        self.history = History(seconds=600, interval=1.0)
        self._time: float | None = None
        self._indexes: tuple[int, ...] | None = None

    @property
    def host_name(self) -> str:
        return self.state.host.name

    def compose(self) -> ComposeResult:
        yield Static(id="host-title")
        yield HostPanel()
        yield VerticalScroll(id="host-gpus")
        yield ProcessTable()
        yield KeysFooter()  # keys left out whole where the width is short, as the views' footer

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.width >= WIDE_SCREEN, "-wide")  # GPU panels two abreast, as in the GPUs view
        self.call_after_refresh(self.show_again)  # the history and command columns to the new widths

    def on_mount(self) -> None:
        self.set_class(self.app.size.width >= WIDE_SCREEN, "-wide")
        table = self.query_one(ProcessTable)
        table.show_all = True
        self.show(self.state)
        self.call_after_refresh(self.show_again)  # again at the laid-out widths
        table.focus()

    def show_again(self) -> None:
        """The state the screen holds when this runs: a state bound when it was queued could be older than one
        shown meanwhile (beside CPU hogs a new state came first), and its sample went into the history again."""
        self.show(self.state)

    def show(self, state: HostState) -> None:
        """A new state of this host: redraw what changed."""
        self.state = state
        title = Text.assemble((state.host.name, "bold"), "  ", link_words(state))
        try:
            snap = Snapshot.from_dict(state.snapshot) if state.snapshot else None
        except ValueError as err:
            snap = None
            title.append(f"  unreadable snapshot: {err}", style="red")
        if snap is not None and snap.gpu.simulated:
            title.append("  SIMULATED", style="bold black on yellow")
        title.append("   esc: back · T/K: signal (confirmed, sent through ssh)", style="dim")
        self.query_one("#host-title", Static).update(title)
        if snap is None:
            return
        if snap.gpu.time != self._time:  # a new sample, not the same one handed again
            self._time = snap.gpu.time
            record(self.history, snap)
        self._draw(snap)

    def _draw(self, snap: Snapshot) -> None:
        indexes = tuple(d.index for d in snap.gpu.devices)
        gpus = self.query_one("#host-gpus", VerticalScroll)
        if indexes != self._indexes:
            self._indexes = indexes
            gpus.remove_children()
            gpus.mount_all([GpuPanel(i, snap.gpu.simulated) for i in indexes])
            if not indexes:
                reason = snap.gpu.reason or "no GPU source answered"
                gpus.mount(Static(f"No GPU shown: {reason}", id="no-gpu", markup=False))
        for dev in snap.gpu.devices:
            for panel in gpus.query(f"#gpu-{dev.index}").results(GpuPanel):
                width = panel.history_width()
                util = self.history.tail(("gpu", dev.index, "util"), width)
                panel.show(dev, util, self.history.tail(("gpu", dev.index, "mem"), width))
        host = self.query_one(HostPanel)
        width = host.history_width()
        host.show(snap.host, self.history.tail(("host", "cpu"), width), self.history.tail(("host", "mem"), width))
        pids = run_pids(self.state.runs)
        self.query_one(ProcessTable).show(snap.gpu.devices, None, pids, {})

    def action_close(self) -> None:
        self.dismiss(None)

    def action_signal(self, name: str) -> None:
        if self.refused(SIGNALS_OFF):
            return
        proc = self.query_one(ProcessTable).selected()
        if proc is None:
            self.notify("Select a process first", severity="warning", markup=False)
            return
        sig = signal.Signals[name]

        def send() -> None:
            self.send(proc, sig)

        ask_signal(self.app, proc, name, send, where=f" on {self.host_name}")

    @work(thread=True, exit_on_error=False, group="remote-signal")
    def send(self, proc: GpuProcess, sig: signal.Signals) -> None:
        try:
            ssh, gpumon = ssh_and_gpumon(self.context.fleet)
        except HostError as err:
            self.post_message(SignalDone(SignalOutcome(False, f"{err}; nothing was sent")))
            return
        self.post_message(SignalDone(signal_process(ssh, self.state.host, gpumon, proc, sig)))

    def on_signal_done(self, message: SignalDone) -> None:
        outcome = message.outcome
        self.notify(outcome.message, severity="information" if outcome.ok else "error", timeout=8, markup=False)
