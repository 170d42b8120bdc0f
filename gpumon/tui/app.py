"""The gpumon Textual app: the view switcher, the feeds it hands the views, and the global keys.

Each view (gpumon/tui/views/) owns its keys, actions and refresh worker; the app only switches between them, passes
them the GPU samples and the runs feed through one ``AppContext``, and holds the keys that work everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal
from textual.driver import Driver
from textual.events import Resize
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import ContentSwitcher

from gpumon.core.doctor.leak import LeakState
from gpumon.core.gpu.idle import IdleWatch
from gpumon.core.model import Snapshot
from gpumon.core.runs.record.store import RunStore
from gpumon.core.sampler import Sampler
from gpumon.tui.app_ahead import HELP, WorkAhead, view_widget
from gpumon.tui.app_keys import FOOTNOTE, GLOBAL_BINDINGS, help_sections, palette_commands
from gpumon.tui.feeds import AlertsRefreshed, OpenRun, RunsRefreshed, SampleReady
from gpumon.tui.heap import keep_built, release
from gpumon.tui.keys import help_rows
from gpumon.tui.notices import Notices
from gpumon.tui.plain import PlainToasts
from gpumon.tui.reader import frame_drawn
from gpumon.tui.textual_private.dirty_lines import draw_changed_lines
from gpumon.tui.textual_private.nodes import mounted_screen
from gpumon.tui.textual_private.repaint import coalesced
from gpumon.tui.typeahead import KeysInOrder
from gpumon.tui.unseen import DrawnLate
from gpumon.tui.view import AppContext, View
from gpumon.tui.views import VIEWS, view_class
from gpumon.tui.widgets.footer import KeysFooter
from gpumon.tui.widgets.screens import HelpScreen
from gpumon.tui.widgets.tabs import ViewTabs
from gpumon.tui.widgets.top_bar import TopAlerts, TopInfo

__all__ = ["GpumonApp"]  # the keys: app_keys.py

WIDE = 160  # columns from which GPU panels sit two abreast


class GpumonApp(KeysInOrder, PlainToasts, App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "gpumon"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = GLOBAL_BINDINGS

    def __init__(
        self,
        sampler: Sampler,
        readonly: bool = False,
        keymap: dict[str, str] | None = None,
        store: RunStore | None = None,
        fleet: Any = None,
    ) -> None:
        """``fleet``: the hosts' monitor (started by the caller), for a view to read; None without hosts."""
        super().__init__()
        self._keys_init()  # keys typed ahead go where the keys before them lead (typeahead.py)
        self.keymap = dict(keymap or {})
        if self.keymap:
            self.set_keymap(self.keymap)
        self.sampler = sampler
        self.idle_watch = IdleWatch()  # the runs' processes holding an idle GPU (core/gpu/idle.py)
        self.readonly = readonly
        self.context = AppContext(readonly=readonly, store=store, fleet=fleet)
        self.view = "fleet" if fleet is not None else VIEWS[0].NAME  # hosts configured: the fleet first
        self._feed_pids: dict[int, str] = {}
        self._focus_of_view: dict[str, Widget | None] = {}
        self._views: dict[str, View] = {}
        self._runs_list: object = None
        self.notices = Notices(self)  # a run's new alert, a host's, a run that finished: whatever view shows
        self._top_info = TopInfo(id="top-info")  # held: no query of the screen per sample
        self._top_alerts = TopAlerts()
        self.ahead = WorkAhead(self, self)  # what a first key would build, built after the start (app_ahead.py)

    # -- layout ---------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="top-bar"):
            yield self._top_info
            yield self._top_alerts
            yield ViewTabs([(v.NAME, v.TITLE) for v in VIEWS], self.view, id="view-tabs")
        views = [cls(self.context) for cls in VIEWS]  # type: ignore[call-arg]
        self._views = {type(v).NAME: v for v in views}  # no DOM query per sample
        with ContentSwitcher(initial=view_widget(self._views[self.view]).id, id="views"):
            yield from (view_widget(v) for v in views)
        self.footer = KeysFooter()  # built once per set of keys: a view switch shows a set already built
        yield self.footer

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver with a quick Escape (textual_private/escape.py), imported only for a terminal."""
        from gpumon.tui.textual_private.escape import quick_driver

        return quick_driver() or super().get_driver_class()

    def view_widget(self, name: str) -> View:
        """The view named ``name`` (its widget is a child of the switcher)."""
        view_class(name)  # an unknown name says which names there are
        return self._views[name]

    def on_mount(self) -> None:
        draw_changed_lines(self.screen)  # a tick's frame asks the widgets for its changed lines only (dirty_lines.py)
        self.sampler.on_sample = self.post_message_from_sampler
        if self.sampler.latest is not None:
            self.apply(self.sampler.latest)
        keep_built(self)  # the views, built: out of the collector's way (heap.py)
        self.ahead.start()

    def views(self) -> Iterable[View]:
        """Every view, in the tabs' order."""
        return self._views.values()

    def on_drawn_late(self, message: DrawnLate) -> None:
        self.ahead.drawn_late(message.view)

    def drawing_unseen(self) -> bool:
        """Whether a view is still to be drawn unseen (tests wait for it)."""
        return self.ahead.drawing_unseen()

    def on_unmount(self) -> None:
        release()

    def post_message_from_sampler(self, snapshot: Snapshot) -> None:
        self.post_message(SampleReady(snapshot))  # thread-safe; never blocks the sampler

    def on_resize(self, event: Resize) -> None:
        self.screen.set_class(event.size.width >= WIDE, "-wide")
        if self._top_alerts.unread > 0:
            self._top_alerts.fit()
        if self.context.snapshot is not None:
            self.call_after_refresh(self.apply, self.context.snapshot)  # redraw history to the new widths

    # -- the feeds --------------------------------------------------------------
    def on_sample_ready(self, message: SampleReady) -> None:
        if not self.is_running:  # posted by the sampler's thread as the app quit: its widgets are gone
            return
        self.context.run_idle = self.idle_watch.update(message.snapshot.gpu, self.context.run_pids)
        self.apply(message.snapshot)
        frame_drawn()  # the feeds' reads due soon, now: the machine is awake (reader.py)

    def apply(self, snap: Snapshot) -> None:
        """Hand a sample to the top bar and to every view."""
        self.context.snapshot = snap
        with coalesced():  # one wake-up of the screen for every widget repainted (repaint.py)
            self._top_info.show(snap.gpu, snap.host.hostname, self.sampler.interval, self.sampler.error)
            for view in self._views.values():
                view.sample(snap, self.sampler.history)

    def on_runs_refreshed(self, message: RunsRefreshed) -> None:
        if not self.is_running:  # the monitor's thread posted it as the app quit
            return
        if message.summaries is self._runs_list:  # the monitor hands the same list while no run changed
            return
        self._runs_list = message.summaries
        self.context.runs = {s.id: s for s in message.summaries}
        self.notices.run_alerts(message.summaries)
        self.notices.finished(message.summaries)
        if message.pids != self._feed_pids:  # only a change: a map set by hand stays until the runs change
            self._feed_pids = message.pids
            self.context.run_ranks = dict(message.ranks)
            self.set_run_pids(message.pids)
        leaks = {s.id: s.leak for s in message.summaries if s.record.live and s.leak is not None}
        self.set_run_leaks({run_id: state for run_id, state in leaks.items() if state is not None})

    def on_alerts_refreshed(self, message: AlertsRefreshed) -> None:
        """The unread count in the top bar; an alert of no run (a fleet host down) is told (notices.py)."""
        if not self.is_running:  # posted as the app quit
            return
        self._top_alerts.count(message.unread)
        self.notices.host_alerts(message.entries)

    def on_open_run(self, message: OpenRun) -> None:
        self.show_view("runs")
        self.view_widget("runs").select_run(message.run_id)

    def set_run_pids(self, pids: dict[int, str]) -> None:
        """Mark these PIDs as the runs' (the RUN column; tests may call it directly)."""
        if pids != self.context.run_pids:
            self.context.run_pids = dict(pids)
            self._runs_changed()

    def set_run_leaks(self, leaks: dict[str, LeakState]) -> None:
        """Warn where a process of these runs shows (the GPU panels; tests may call it directly)."""
        if leaks != self.context.run_leaks:
            self.context.run_leaks = dict(leaks)
            self._runs_changed()

    def _runs_changed(self) -> None:
        for view in self._views.values():
            view.runs_changed()

    # -- views ----------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action == "view" and parameters and parameters[0] == self.view)  # the view shown: hidden

    def action_view(self, name: str) -> None:
        self.show_view(name)

    def show_view(self, name: str) -> None:
        view = self.view_widget(name)
        if name == self.view:
            return
        self._focus_of_view[self.view] = self.focused
        self.view_widget(self.view).hidden()
        self.view = name
        self.query_one("#views", ContentSwitcher).current = view_widget(view).id
        self.query_one(ViewTabs).set_current(name)
        view.showing()
        remembered = self._focus_of_view.get(name)
        if remembered is not None and remembered.is_attached:
            remembered.focus()
        else:
            view.focus_first()
        self.refresh_bindings()
        # the footer's keys for the view, set in the same pass as the view (its focus lands first: both are
        # queued): else Textual tells the footer after the frame, and a second layout of the screen follows
        self.call_later(self.footer.show_built)
        # its reads (a worker thread each, Runs' 20 runs, the doctor's diagnosis) start once the view is
        # drawn from what it holds: a thread holding the GIL while the key's frame is drawn halves its pace
        self.call_after_refresh(view.shown)
        if self.ahead.first_showing(name):  # what its first showing built (its rows, its drawn cells) is kept
            keep_built(self)

    def action_help(self) -> None:
        """Open the help; the help key (as remapped too) closes it again."""
        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss(None)
            return
        if self.help_screen() not in self.screen_stack:  # a palette over it: it is there already
            self.push_screen(HELP)

    def help_screen(self) -> Screen[object]:
        """The help, built once (ahead, or at the first `?`): opened again, it is drawn at once."""
        if not self.is_screen_installed(HELP):
            self.install_screen(HelpScreen(help_rows(help_sections(), self.keymap), FOOTNOTE), HELP)
            keep_built(self)
        return mounted_screen(self, HELP)  # composed and mounted now

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from palette_commands(self)
