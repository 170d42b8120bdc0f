"""The app's work done ahead of the keys: what a first key would build or draw, done after the start while no key
waits, one piece at a time behind any key that came meanwhile (ahead.py ``OneAtATime``). The app's part, as
app_keys.py: it knows the views, the help and the launch form.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from textual.app import App
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import ContentSwitcher

from gpumon.tui.ahead import OneAtATime
from gpumon.tui.heap import keep_built
from gpumon.tui.textual_private.offscreen import UnseenViews
from gpumon.tui.unseen import stopping
from gpumon.tui.view import View
from gpumon.tui.views.runs.launching import FORM
from gpumon.tui.widgets.focus_look import style_for_focus
from gpumon.tui.widgets.footer import KeysFooter

HELP = "help"  # the help screen's name among the app's installed screens
# What a first key would build is built 0.5 s after the first frame, the footer's keys 0.5 s later (WorkAhead.build):
# done well before a person's first key (the bench's comes 2 s after the first full frame), which would wait for it.
AHEAD_S = 0.5
MOUNT_WAIT_S = 5.0  # the most the footer's keys drawn ahead wait for their mounting (a loaded machine)


class Cockpit(Protocol):
    """What the work ahead needs of gpumon's app (app.py) beside Textual's App."""

    view: str  # the view shown
    footer: KeysFooter

    def views(self) -> Iterable[View]: ...
    def view_widget(self, name: str) -> View: ...
    def help_screen(self) -> Screen[object]: ...
    def key_drawing(self) -> bool: ...


class WorkAhead:
    """What the first press of a key built on its path, built and drawn shortly after the start instead: the help,
    the launch form, each view's footer keys (100-500 ms each on this machine), then the hidden views, the help and
    the form laid out and drawn unseen (unseen.py), then the footer's keys measured and drawn. Nothing once the app
    began to stop (unseen.py ``stopping``)."""

    def __init__(self, app: App[Any], cockpit: Cockpit) -> None:
        """``cockpit``: the same app, as gpumon's."""
        self._app = app
        self._cockpit = cockpit
        self.pieces = OneAtATime(app, cockpit.key_drawing)  # behind any key and its frame
        self.unseen = UnseenViews()
        self.laid_out = False  # the help, the form and the hidden views laid out and drawn, unseen
        self._began = False  # the hidden views' first unseen draw is under way or done
        self._due: set[View] = set()  # views to draw unseen again (DrawnLate)
        # views shown on screen once: what their first showing built is kept (heap.py), what they drew is the
        # screen's (their sizes too): never drawn unseen again
        self.shown_once: set[str] = {cockpit.view}

    def start(self) -> None:
        """Once the app's first frame is drawn (called from its mount)."""
        self._app.call_after_refresh(self._app.set_timer, AHEAD_S, self.build)

    def drawing_unseen(self) -> bool:
        """Whether a view is still to be drawn unseen (tests wait for it)."""
        return not self.laid_out or bool(self._due)

    def first_showing(self, name: str) -> bool:
        """View ``name`` is shown: whether for the first time."""
        first = name not in self.shown_once
        self.shown_once.add(name)
        return first

    def build(self) -> None:
        app, cockpit = self._app, self._cockpit
        if stopping(app):
            return
        self.pieces.add(cockpit.help_screen)
        self.pieces.add(cockpit.view_widget("runs").prepare_form)  # type: ignore[attr-defined]
        for view in cockpit.views():
            view.ahead()
        app.set_timer(AHEAD_S, self._keys_later)  # once those reads have shown (a table hidden or not)

    def _keys_later(self) -> None:
        app, footer = self._app, self._cockpit.footer
        if not stopping(app) and footer.is_attached:
            footer.call_later(self._keys)  # run by the footer: its keys bind to it as they are built
            footer.call_later(keep_built, app)
            app.call_later(self.lay_out)

    def _keys(self) -> None:
        """Each view's footer keys, as offered with the focus where the view's key puts it: set unseen (no focus
        event, no restyle) for the footer to read, then put back."""
        app, cockpit = self._app, self._cockpit
        if stopping(app):
            return
        footer = cockpit.footer
        screen, view = footer.screen, cockpit.view
        focused = screen.focused
        try:
            for other in cockpit.views():
                name = type(other).NAME
                if name != view:  # (a view with nothing to focus: the keys offered with no focus)
                    cockpit.view = name  # check_action hides the shown view's own key
                    screen.set_reactive(Screen.focused, other.focus_target())
                    footer.build_ahead()
        finally:
            cockpit.view = view
            screen.set_reactive(Screen.focused, focused)

    def lay_out(self, again: bool = True) -> None:
        """The help, the launch form and each hidden view, built ahead, laid out and drawn once unseen: their first
        showing laid out and drew every widget of them on its key's path (60-140 ms of CPU: the first `r` drew the
        whole Runs table), later ones only show them. Then the footer's keys built ahead are measured and drawn."""
        if stopping(self._app):
            return
        self._began = True
        for view in self._cockpit.views():  # each in its own callback: a key that comes meanwhile waits on one
            self.pieces.add(self.draw_unseen, view)
        for name in (HELP, FORM):  # after the views (a first key is likelier a view's; each 30-45 ms of CPU)
            self.pieces.add(self.lay_out_screen, name, again)
        if again:  # once what that layout told the widgets (their sizes) has been handled
            self._app.set_timer(AHEAD_S, lambda: self.lay_out(again=False))
        else:
            self.pieces.add(self._footer_keys)

    def lay_out_screen(self, name: str, again: bool) -> None:
        app = self._app
        screen = app.get_screen(name) if app.is_screen_installed(name) else None
        if isinstance(screen, Screen) and screen.is_mounted and screen not in app.screen_stack:
            self.unseen.lay_out(screen, app.size, again)

    def draw_unseen(self, view: View, last: bool = False) -> None:
        app = self._app
        widget = view_widget(view)
        if not widget.display and type(view).NAME not in self.shown_once and not stopping(app):
            focus = view.focus_target()
            if focus is not None and focus.has_focus:
                focus = None
            style_for_focus(focus)  # as its key will focus it: that key then restyles nothing
            self.unseen.draw(widget, app.query_one("#views", ContentSwitcher).size, focus)
        if last:
            self.unseen.forget(widget)
            self._due.discard(view)

    def drawn_late(self, view: object) -> None:
        """A hidden view read its first content after (or while) it was drawn unseen: drawn again, twice as above."""
        if stopping(self._app) or not self._began or not isinstance(view, View):
            return  # not yet begun: the first pass draws it
        self._due.add(view)
        self.pieces.add(self.draw_unseen, view)
        self._app.set_timer(AHEAD_S, lambda: self.draw_unseen(view, last=True))

    def _footer_keys(self, waited: float = 0.0) -> None:
        app, footer = self._app, self._cockpit.footer
        if not stopping(app) and not footer.mounted() and waited < MOUNT_WAIT_S:
            app.set_timer(0.1, lambda: self._footer_keys(waited + 0.1))  # the footer's keys built ahead, once mounted
            return
        if not stopping(app):  # the sets of keys built ahead by now (_keys_later), each in its own piece
            for keyset in footer.sets_ahead():
                self.pieces.add(footer.measure_ahead, keyset)
                self.pieces.add(footer.draw_ahead, keyset, self.unseen.draw)  # as its view's key shows it
        self.pieces.add(self._done)

    def _done(self) -> None:
        if not stopping(self._app):
            self.laid_out = True
        self.unseen.forget()


def view_widget(view: View) -> Widget:
    """A view as the widget it is (a child of the app's switcher)."""
    assert isinstance(view, Widget)
    return view
