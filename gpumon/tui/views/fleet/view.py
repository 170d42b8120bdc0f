"""The Fleet view: every host's GPUs, a compact line each, under a header per host and the fleet's total.

With a fleet (``context.fleet``, a FleetMonitor), a timer reads ``fleet.state()`` while the view shows
and draws it each second, or at once when a host's link changed (5 times a second it looks): ``state()``
returns the latest FleetState at once (its links read ssh on their own threads), so the
event loop never waits on a host. Without a fleet it shows this machine from the sampler's feed and
says how to add hosts. Hosts and GPU lines are widgets updated by diff (host_block.py); enter opens a
host's full GPU view (host_screen.py), or the GPUs view for this machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.events import DescendantFocus
from textual.markup import escape
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static

from gpumon.core.fleet.hosts import LOCAL, Host, fleet_config_path
from gpumon.core.fleet.lines import fleet_line
from gpumon.core.fleet.model import FleetState, HostState
from gpumon.core.history import History
from gpumon.core.model import Snapshot
from gpumon.tui.view import AppContext, Command, View
from gpumon.tui.views.fleet.host_block import HostBlock, host_rows
from gpumon.tui.views.fleet.host_screen import HostScreen

REFRESH_S = 1.0
LOOK_S = 0.2  # how often the view looks for a host whose link changed (drawn at once, not at the next second)


def local_state(snapshot: Snapshot) -> FleetState:
    """This machine alone, as a one-host fleet (no fleet configured)."""
    host = Host(snapshot.host.hostname, LOCAL)
    return FleetState((HostState(host, "live", since=snapshot.gpu.time, snapshot=snapshot.to_dict()),), time.time())


class HostList(VerticalScroll, can_focus=False, inherit_bindings=False):
    """The host blocks, scrolled: up/down and home/end are the view's (they move the selection, and the
    list follows it); only the page keys scroll the list itself."""

    BINDINGS = [
        Binding("pageup", "page_up", "page up", show=False),
        Binding("pagedown", "page_down", "page down", show=False),
    ]


class FleetView(View, Vertical):
    NAME = "fleet"
    TITLE = "Fleet"
    KEYS = "h,alt+h"  # h: hosts (f filters the Trials view)
    HELP_NOTE = "every host's GPUs, a line each (who uses it, which run); enter: that host's GPUs and processes"
    HELP_WIDGETS = (HostScreen,)
    BINDINGS = [
        Binding("up,k", "step(-1)", "prev host", show=False, id="host_prev", tooltip="previous host"),
        Binding("down,j", "step(1)", "next host", show=False, id="host_next", tooltip="next host"),
        Binding("home", "edge(0)", "first host", show=False, id="host_first", tooltip="first host"),
        Binding("end", "edge(-1)", "last host", show=False, id="host_last", tooltip="last host"),
        Binding("enter", "open_host", "open host", id="open_host", tooltip="the selected host's GPUs and processes"),
    ]

    def __init__(self, context: AppContext) -> None:
        super().__init__(id="fleet")
        self.context = context
        self.state: FleetState | None = None
        self.selected: str | None = None
        self._names: tuple[str, ...] | None = None
        self._blocks: dict[str, HostBlock] = {}
        self._total: str | None = None
        self._summary: str | None = None
        self._stale = False
        self._links: tuple[str, ...] = ()
        self._drawn_at = 0.0
        self._looks: Timer | None = None  # with a fleet: its look for a changed link

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-total")
        yield Static(id="fleet-slurm")  # a Slurm cluster's partitions (--slurm), read by core off this thread
        hint = Text.assemble(
            ("This machine only. Add hosts: ", "dim"),
            ("gpumon --hosts a,b", "bold"),
            (" or [fleet] hosts in ", "dim"),
            (str(fleet_config_path()).replace(str(fleet_config_path().home()), "~"), "bold"),
        )
        yield Static(hint, id="fleet-hint")
        yield HostList(id="fleet-hosts")

    def on_mount(self) -> None:
        self.query_one("#fleet-hint").display = self.context.fleet is None
        self.query_one("#fleet-slurm").display = False
        if self.context.fleet is not None:
            self._looks = self.set_interval(LOOK_S, self.poll)  # while shown (hidden, shown): the first view
            self.poll()
        elif self.context.snapshot is not None:
            self.draw(local_state(self.context.snapshot))

    # -- the feeds ------------------------------------------------------------------
    def poll(self) -> None:
        """The fleet's latest state; drawn only while the view shows (else when it shows again)."""
        if not self.display:
            self._stale = True
            return
        state = self.context.fleet.state()
        links = tuple(h.link for h in state.hosts)
        due = time.monotonic() - self._drawn_at >= REFRESH_S - LOOK_S / 2
        if self._stale or due or links != self._links:  # a host came live, went stale or down: show it now
            self.draw(state)

    def sample(self, snapshot: Snapshot, history: History) -> None:
        if self.context.fleet is not None:
            return
        if self.state is None and self.is_mounted:  # the first, shown or not: its blocks are built now, not by `h`
            self.draw(local_state(snapshot))
            return
        if not self.display or not self.is_mounted:
            self._stale = True
            return
        self.draw(local_state(snapshot))

    def runs_changed(self) -> None:
        if self.state is not None:
            self.draw(self.state)

    def showing(self) -> None:
        """What came while hidden, in the key's own frame (the fleet's state is held in memory: no read)."""
        if not self._stale:
            return
        if self.context.fleet is not None:
            self.draw(self.context.fleet.state())
        elif self.context.snapshot is not None:
            self.draw(local_state(self.context.snapshot))

    def hidden(self) -> None:
        """No look at all while hidden (5 a second that only marked the view stale); what it drew is stale now:
        the fleet's state moves on its own thread, and ``showing`` draws it in the key's frame."""
        if self._looks is not None:
            self._looks.pause()
            self._stale = True

    def shown(self) -> None:
        if self.context.fleet is not None:
            if self._looks is not None:
                self._looks.resume()
            self.poll()
        elif self.context.snapshot is not None:
            self.draw(local_state(self.context.snapshot))

    # -- drawing ----------------------------------------------------------------------
    def draw(self, state: FleetState) -> None:
        self.state, self._stale = state, False
        self._links, self._drawn_at = tuple(h.link for h in state.hosts), time.monotonic()
        names = tuple(h.host.name for h in state.hosts)
        if names != self._names:
            self._rebuild(names)
        hosts = self.query_one(HostList)
        top, low, high = 0, hosts.scroll_y, hosts.scroll_y + hosts.scrollable_content_region.height
        for host in state.hosts:  # stacked in order, each as high as host_rows says: which ones show
            rows = host_rows(host)
            pids = self.context.run_pids if host.host.local else None
            self._blocks[host.host.name].show(host, pids, in_view=top < high and top + rows > low)
            top += rows
        total = fleet_line(state)
        if total != self._total:
            self._total = total
            self.query_one("#fleet-total", Static).update(Text(total, style="bold"))
        summary = getattr(self.context.fleet, "summary", None)
        line = summary() if callable(summary) else None  # a reference read: squeue and sinfo ran on core's thread
        if line != self._summary:
            self._summary = line
            widget = self.query_one("#fleet-slurm", Static)
            widget.display = bool(line)
            widget.update(Text(line or "", style="dim"))  # Slurm's words, never markup
        screen = self.app.screen
        if isinstance(screen, HostScreen):
            for host in state.hosts:
                if host.host.name == screen.host_name and host is not screen.state:
                    screen.show(host)

    def _rebuild(self, names: tuple[str, ...]) -> None:
        hosts = self.query_one("#fleet-hosts", HostList)
        hosts.remove_children()
        self._names = names
        self._blocks = {name: HostBlock(name, id=f"host-{i}") for i, name in enumerate(names)}
        hosts.mount_all(self._blocks.values())
        if self.selected not in self._blocks:
            self.selected = names[0] if names else None
        if self.display:
            self.call_after_refresh(self._focus_if_shown)

    def _focus_if_shown(self) -> None:
        """Deferred: the user may have switched views since (``r`` pressed at start), and keeps that focus."""
        if self.display:
            self.focus_first()

    # -- selection --------------------------------------------------------------------
    def focus_target(self) -> Widget | None:
        block = self._blocks.get(self.selected or "")
        return block if block is not None else super().focus_target()

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        if isinstance(event.widget, HostBlock):
            self.selected = event.widget.host_name

    def on_host_block_clicked(self, message: HostBlock.Clicked) -> None:
        message.block.focus()

    def action_step(self, step: int) -> None:
        names = self._names or ()
        if not names:
            return
        position = names.index(self.selected) if self.selected in names else 0
        self._select(names[(position + step) % len(names)])

    def _select(self, name: str) -> None:
        self.selected = name
        self._blocks[name].focus()
        self._blocks[name].scroll_visible(animate=False)

    def action_edge(self, index: int) -> None:
        if self._names:
            self._select(self._names[index])

    async def action_open_host(self) -> None:
        host = next((h for h in (self.state.hosts if self.state else ()) if h.host.name == self.selected), None)
        if host is None:
            return
        if host.host.local:  # this machine: the GPUs view has its history and local signals
            await self.app.run_action("view('gpus')")
            return
        if not host.snapshot:
            self.notify(
                f"{host.host.name}: no snapshot yet ({host.reason or host.link})", severity="warning", markup=False
            )
            return
        self.app.push_screen(HostScreen(host, self.context))

    def commands(self) -> Iterable[Command]:
        for name in self._names or ():  # the palette reads markup: a host name is not ours ("[fe80::1]")
            shown = escape(name)
            yield Command(f"Fleet: open {shown}", f"{shown}'s GPUs and processes", lambda n=name: self._open(n))

    def _open(self, name: str) -> None:
        self.selected = name
        self.run_worker(self.action_open_host(), exclusive=False)
