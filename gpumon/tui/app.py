"""The gpumon Textual app: the view switcher, the feeds it hands the views, and the global keys.

Each view (gpumon/tui/views/) owns its keys, actions and refresh worker; the
app only switches between them, passes them the GPU samples and the runs feed
through one ``AppContext``, and holds the keys that work everywhere.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual import constants as textual_constants
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal
from textual.driver import Driver
from textual.events import Resize
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Static

from gpumon.core.doctor.leak import LeakState
from gpumon.core.gpu.idle import IdleWatch
from gpumon.core.model import Snapshot
from gpumon.core.runs.record.store import RunStore
from gpumon.core.sampler import Sampler
from gpumon.tui.ahead import OneAtATime
from gpumon.tui.app_keys import FOOTNOTE, GLOBAL_BINDINGS, help_sections
from gpumon.tui.dirty_lines import draw_changed_lines
from gpumon.tui.feeds import AlertsRefreshed, OpenRun, RunsRefreshed, SampleReady
from gpumon.tui.heap import keep_built, release
from gpumon.tui.keys import help_rows
from gpumon.tui.notices import Notices
from gpumon.tui.plain import PlainToasts
from gpumon.tui.reader import frame_drawn
from gpumon.tui.repaint import coalesced
from gpumon.tui.typeahead import KeysInOrder
from gpumon.tui.unseen import DrawnLate, UnseenViews, stopping
from gpumon.tui.view import AppContext, View
from gpumon.tui.views import VIEWS, view_class
from gpumon.tui.views.runs.launching import FORM
from gpumon.tui.widgets.focus_look import style_for_focus
from gpumon.tui.widgets.footer import KeysFooter
from gpumon.tui.widgets.screens import HelpScreen
from gpumon.tui.widgets.tabs import ViewTabs
from gpumon.tui.widgets.top_bar import TopInfo

__all__ = ["GpumonApp"]  # the keys: app_keys.py

HELP = "help"  # the help screen's name among the installed screens
# What a first key would build is built 0.5 s after the first frame, the footer's keys 0.5 s later (_build_ahead):
# done well before a person's first key (the bench's comes 2 s after the first full frame), which would wait for it.
AHEAD_S = 0.5
MOUNT_WAIT_S = 5.0  # the most the footer's keys drawn ahead wait for their mounting (a loaded machine)
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
        self._unread = -1
        self._top_info = TopInfo(id="top-info")  # held: no query of the screen per sample
        self.laid_out_ahead = False  # the help, the form and the hidden views laid out and drawn, unseen
        self._unseen = UnseenViews()  # (_lay_out_ahead)
        self._ahead = OneAtATime(self, self.key_drawing)  # that work's pieces, behind any key and its frame
        self._unseen_began = False  # the hidden views' first unseen draw is under way or done
        self._unseen_due: set[View] = set()  # views to draw unseen again (DrawnLate)
        # views shown on screen once: what their first showing built is kept (heap.py), what they drew is the
        # screen's (their sizes too): never drawn unseen again
        self._shown_once: set[str] = {self.view}

    # -- layout ---------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="top-bar"):
            yield self._top_info
            yield Static(Text(""), id="top-alerts")
            yield ViewTabs([(v.NAME, v.TITLE) for v in VIEWS], self.view, id="view-tabs")
        views = [cls(self.context) for cls in VIEWS]  # type: ignore[call-arg]
        self._views = {type(v).NAME: v for v in views}  # no DOM query per sample
        with ContentSwitcher(initial=self._widget(self._views[self.view]).id, id="views"):
            yield from (self._widget(v) for v in views)
        self._footer = KeysFooter()  # built once per set of keys: a view switch shows a set already built
        yield self._footer

    @staticmethod
    def _widget(view: View) -> Widget:
        assert isinstance(view, Widget)
        return view

    def get_driver_class(self) -> type[Driver]:
        """Textual's terminal driver with a quick Escape (tui/escape.py); TEXTUAL_DRIVER and Windows as Textual."""
        if textual_constants.DRIVER is not None or sys.platform == "win32":
            return super().get_driver_class()
        from gpumon.tui.escape import QuickEscapeDriver

        return QuickEscapeDriver

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
        self.call_after_refresh(self.set_timer, AHEAD_S, self._build_ahead)

    def _build_ahead(self) -> None:
        """What the first press of a key built on its path (100-500 ms each on this machine): the help, the
        launch form, each view's footer keys. Built once, shortly after the start, while no key waits; nothing once
        the app began to stop (unseen.py ``stopping``)."""
        if stopping(self):
            return
        self._ahead.add(self._help_screen)
        self._ahead.add(self.view_widget("runs").prepare_form)  # type: ignore[attr-defined]
        for view in self._views.values():
            view.ahead()
        self.set_timer(AHEAD_S, self._keys_ahead_later)  # once those reads have shown (a table hidden or not)

    def _keys_ahead_later(self) -> None:
        if not stopping(self) and self._footer.is_attached:
            self._footer.call_later(self._keys_ahead)  # run by the footer: its keys bind to it as they are built
            self._footer.call_later(keep_built, self)
            self.call_later(self._lay_out_ahead)

    def _lay_out_ahead(self, again: bool = True) -> None:
        """The help, the launch form and each hidden view, built ahead, laid out and drawn once unseen: their first
        showing laid out and drew every widget of them on its key's path (60-140 ms of CPU: the first `r` drew the
        whole Runs table), later ones only show them. Then the footer's keys built ahead are measured and drawn."""
        if stopping(self):
            return
        self._unseen_began = True
        for view in self._views.values():  # each in its own callback: a key that comes meanwhile waits on one
            self._ahead.add(self._draw_unseen, view)
        for name in (HELP, FORM):  # after the views (a first key is likelier a view's; each 30-45 ms of CPU)
            self._ahead.add(self._lay_out_screen, name, again)
        if again:  # once what that layout told the widgets (their sizes) has been handled
            self.set_timer(AHEAD_S, lambda: self._lay_out_ahead(again=False))
        else:
            self._ahead.add(self._laid_out)

    def _lay_out_screen(self, name: str, again: bool) -> None:
        screen = self._installed_screens.get(name)
        if isinstance(screen, Screen) and screen.is_mounted and screen not in self.screen_stack:
            self._unseen.lay_out(screen, self.size, again)

    def _draw_unseen(self, view: View, last: bool = False) -> None:
        widget = self._widget(view)
        if not widget.display and type(view).NAME not in self._shown_once and not stopping(self):
            focus = view.focus_target()
            if focus is not None and focus.has_focus:
                focus = None
            style_for_focus(focus)  # as its key will focus it: that key then restyles nothing
            self._unseen.draw(widget, self.query_one("#views", ContentSwitcher).size, focus)
        if last:
            self._unseen.forget(widget)
            self._unseen_due.discard(view)

    def on_drawn_late(self, message: DrawnLate) -> None:
        """A hidden view read its first content after (or while) it was drawn unseen: drawn again, twice as above."""
        view = message.view
        if stopping(self) or not self._unseen_began or not isinstance(view, View):
            return  # not yet begun: the first pass draws it
        self._unseen_due.add(view)
        self._ahead.add(self._draw_unseen, view)
        self.set_timer(AHEAD_S, lambda: self._draw_unseen(view, last=True))

    def drawing_unseen(self) -> bool:
        """Whether a view is still to be drawn unseen (tests wait for it)."""
        return not self.laid_out_ahead or bool(self._unseen_due)

    def _laid_out(self, waited: float = 0.0) -> None:
        if not stopping(self) and not self._footer.mounted() and waited < MOUNT_WAIT_S:
            self.set_timer(0.1, lambda: self._laid_out(waited + 0.1))  # the footer's keys built ahead, once mounted
            return
        if not stopping(self):  # the sets of keys built ahead by now (_keys_ahead_later), each in its own piece
            for keyset in self._footer.sets_ahead():
                self._ahead.add(self._footer.measure_ahead, keyset)
                self._ahead.add(self._footer.draw_ahead, keyset, self._unseen.draw)  # as its view's key shows it
        self._ahead.add(self._all_laid_out)

    def _all_laid_out(self) -> None:
        if not stopping(self):
            self.laid_out_ahead = True
        self._unseen.forget()

    def _keys_ahead(self) -> None:
        """Each view's footer keys, as offered with the focus where the view's key puts it: set unseen (no focus
        event, no restyle) for the footer to read, then put back."""
        if stopping(self):
            return
        screen, view = self._footer.screen, self.view
        focused = screen.focused
        try:
            for name, other in self._views.items():
                if name != view:  # (a view with nothing to focus: the keys offered with no focus)
                    self.view = name  # check_action hides the shown view's own key
                    screen.set_reactive(Screen.focused, other.focus_target())
                    self._footer.build_ahead()
        finally:
            self.view = view
            screen.set_reactive(Screen.focused, focused)

    def on_unmount(self) -> None:
        release()

    def post_message_from_sampler(self, snapshot: Snapshot) -> None:
        self.post_message(SampleReady(snapshot))  # thread-safe; never blocks the sampler

    def on_resize(self, event: Resize) -> None:
        self.screen.set_class(event.size.width >= WIDE, "-wide")
        if self._unread > 0:
            self._alert_badge()
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

    def _alert_badge(self) -> None:
        """' ! 2 unread alerts ' in the top bar; ' ! 2 new ' below 100 columns, where the GPU count needs the room."""
        unread = self._unread
        if unread <= 0:
            words = ""
        elif self.size.width < 100:
            words = f" ! {unread} new "
        else:
            words = f" ! {unread} unread alert{'s' if unread != 1 else ''} "
        self.query_one("#top-alerts", Static).update(Text(words, style="bold red"))

    def on_alerts_refreshed(self, message: AlertsRefreshed) -> None:
        """The unread count in the top bar; an alert of no run (a fleet host down) is told (notices.py)."""
        if not self.is_running:  # posted as the app quit
            return
        unread = message.unread
        if unread != self._unread:
            self._unread = unread
            self._alert_badge()
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
        self.query_one("#views", ContentSwitcher).current = self._widget(view).id
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
        self.call_later(self._footer.show_built)
        # its reads (a worker thread each, Runs' 20 runs, the doctor's diagnosis) start once the view is
        # drawn from what it holds: a thread holding the GIL while the key's frame is drawn halves its pace
        self.call_after_refresh(view.shown)
        if name not in self._shown_once:  # what its first showing built (its rows, its drawn cells) is kept
            self._shown_once.add(name)
            keep_built(self)

    def action_help(self) -> None:
        """Open the help; the help key (as remapped too) closes it again."""
        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss(None)
            return
        if self._help_screen() not in self.screen_stack:  # a palette over it: it is there already
            self.push_screen(HELP)

    def _help_screen(self) -> Screen[object]:
        """The help, built once (ahead, or at the first `?`): opened again, it is drawn at once."""
        if not self.is_screen_installed(HELP):
            self.install_screen(HelpScreen(help_rows(help_sections(), self.keymap), FOOTNOTE), HELP)
            keep_built(self)
        return self._get_screen(HELP)[0]  # Textual's first step of push_screen: composed and mounted now

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Help", "All keys of gpumon", self.action_help)
        for cls in VIEWS:
            keys = cls.KEYS.replace(",", " / ")
            yield SystemCommand(f"View: {cls.TITLE}", f"Show the {cls.TITLE} view ({keys})", self._shower(cls.NAME))
        for cls in VIEWS:
            for command in self.view_widget(cls.NAME).commands():
                yield SystemCommand(command.title, command.help, self._shower(cls.NAME, command.callback))

    def _shower(self, name: str, then: Any = None) -> Any:
        """Show view ``name``, then run ``then``: a view's command acts where its keys would."""

        def run() -> None:
            self.show_view(name)
            if then is not None:
                then()

        return run
