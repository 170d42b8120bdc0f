"""A sample's repaints handed to the screen at once, not widget by widget, and drawn at once.

Textual's ``refresh()`` wakes the widget's own message pump (a Prompt); its idle posts an Update to the screen, whose
handler wakes the screen (another Prompt), whose idle starts the frame timer: two messages and two task switches per
changed widget, 11 messages a tick for the idle monitor. Inside ``coalesced()`` the widgets that opt in
(``Coalesced``) hold that wake-up; at its end each that needs only a repaint goes straight on its screen's dirty set
and the screen draws its frame then (the frame timer's resume, sleep and tick were three more wake-ups a sample).
Any other need (a layout, a scroll, styles, a callback) goes Textual's way, as does everything once Textual's private
parts are found moved (pinned for the tests only).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from textual.screen import Screen
from textual.widget import Widget

_held: list[Any] | None = None  # the widgets whose wake-up waits for the end of coalesced()


class Coalesced:
    """Mixed in before the widget's class: its wake-ups inside ``coalesced()`` wait for its end."""

    works = True  # False once Textual's private parts were found moved

    def check_idle(self) -> None:
        if _held is not None and Coalesced.works:
            _held.append(self)
            return
        super().check_idle()  # type: ignore[misc]


@contextmanager
def coalesced() -> Iterator[None]:
    """Hold the wake-ups of ``Coalesced`` widgets until the end; then hand their repaints to their screens."""
    global _held
    if _held is not None:  # nested: the outer one hands them over
        yield
        return
    _held = []
    try:
        yield
    finally:
        held, _held = _held, None
        hand_over(held)


def hand_over(widgets: list[Widget]) -> None:
    screens: dict[Screen[Any], None] = {}
    for widget in dict.fromkeys(widgets):
        try:
            screen = _repainted(widget)
            wake = screen is False or bool(widget._next_callbacks)  # call_next's callbacks run at its idle
        except (AttributeError, TypeError, KeyError):  # Textual's internals moved
            Coalesced.works, screen, wake = False, None, True
        if wake:
            Widget.check_idle(widget)  # as Textual would have
        if isinstance(screen, Screen):
            screens[screen] = None
    for screen in screens:
        if Coalesced.works and screen.is_current and not screen.app._batch_count:
            try:
                if not _drawn_now(screen):
                    screen._update_timer.resume()  # what the screen's idle does with dirty widgets
            except (AttributeError, TypeError):  # Textual's internals moved
                Coalesced.works = False
                screen.check_idle()
        else:
            screen.check_idle()


def _drawn_now(screen: Any) -> bool:
    """Draw the screen's dirty widgets now, as its frame timer would (``Screen._on_timer_update``), where only
    repaints are due: the timer's resume, sleep and tick cost three wake-ups of the event loop a sample, each a
    cold start on a shared machine. False (not drawn) where the screen needs more (a layout, a scroll, a recompose,
    a callback after the frame): the timer's way."""
    if screen._layout_required or screen._scroll_required or screen._repaint_required:
        return False
    if screen._recompose_required or screen._callbacks or not screen._dirty_widgets:
        return False
    screen._compositor.update_widgets(screen._dirty_widgets)
    screen._compositor_refresh()
    return True


def _repainted(widget: Any) -> Screen[Any] | bool | None:
    """Put a widget that needs only a repaint on its screen's dirty set (what its idle and the screen's Update
    handler do; a widget busy with other messages finds nothing left to do at its idle): the screen, None for
    nothing to do, False where it needs Textual's own way (a layout, a scroll, its styles)."""
    if not Coalesced.works or widget._parent is None or widget._closing or not widget._is_mounted:
        return False
    if widget._layout_required or widget._scroll_required or widget._refresh_styles_required:
        return False
    if widget._recompose_required:
        return False
    if not widget._repaint_required:
        return None
    screen = widget.screen
    widget._repaint_required = False
    if not widget.display or screen not in screen._compositor:
        return None
    screen._dirty_widgets.add(widget)
    return screen
