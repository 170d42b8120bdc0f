"""Hidden views, and the help and the form installed but not shown, laid out and drawn out of sight (unseen.py
says why), on Textual's private compositor and layout flags. Where those moved, ``failed`` holds the error and
nothing more is drawn ahead: the first presses lose their speed, never the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.events import Resize
from textual.geometry import Size
from textual.screen import Screen
from textual.widget import Widget

from gpumon.tui.unseen import stopping

if TYPE_CHECKING:
    from textual._compositor import Compositor
else:
    try:
        from textual._compositor import Compositor
    except ImportError:  # moved: nothing is drawn ahead (UnseenViews.failed)
        Compositor = None

LAYOUTS_MAX = 4  # layouts in a row out of sight: a scrollbar shown settles one in 2, a virtual size set in 2


def _asked_again(root: Widget) -> bool:
    """Whether a widget under ``root`` (or ``root``) asked for a layout while it was laid out out of sight (a size,
    a virtual size or a scrollbar changed): what Textual's idle handler does with that request (each ancestor's
    arrangement and measures dropped) is done at once and the request taken back: the caller lays ``root`` out again.
    Left to Textual, that request came too late for the layout out of sight, and the first showing measured those
    widgets again on its key's path (the doctor's text, ~10 ms; each footer key)."""
    asked = [widget for widget in root.walk_children(Widget, with_self=True) if widget._layout_required]
    for widget in asked:
        widget._layout_required = False
        for ancestor in widget.ancestors:  # as Widget._check_refresh
            if not isinstance(ancestor, Widget):
                break
            ancestor._clear_arrangement_cache()
            ancestor._layout_updates += 1
            if not ancestor.styles.auto_dimensions:
                break
    return bool(asked)


class UnseenViews:
    """Hidden views laid out and drawn out of sight; a compositor each, kept between passes (a second pass lays out
    again only what the first one's Resize events changed)."""

    def __init__(self) -> None:
        self._compositors: dict[Widget, Compositor] = {}
        self.failed: BaseException | None = None  # Textual's internals moved (pinned for tests, not for users)
        if Compositor is None:
            self.failed = ImportError("textual._compositor.Compositor")

    def draw(self, view: Widget, size: Size, focus: Widget | None = None) -> bool:
        """Lay ``view`` out at ``size`` and draw each of its widgets once, ``focus`` drawn as its key will show it
        (focused: a table's drawn lines are kept per focus state), unless the view shows already (its key came
        first) or the app stops. Whether it was drawn."""
        if view.display or not view.is_attached or stopping(view.app) or not size or self.failed is not None:
            self._compositors.pop(view, None)
            return False
        try:
            return self._draw(view, size, focus)
        except Exception as err:  # noqa: BLE001 - private Textual API: a Textual whose internals moved costs the
            self.failed = err  # first presses their speed, never the app
            self._compositors.clear()
            return False

    def _draw(self, view: Widget, size: Size, focus: Widget | None) -> bool:
        compositor = self._compositors.setdefault(view, Compositor())
        resized: dict[Widget, Resize] = {}
        for _ in range(LAYOUTS_MAX):  # until no widget asks for another: each then finds its box as it was measured
            _hidden, shown, _resized = compositor.reflow(view, size)
            for widget, geometry in compositor.layers:  # as Screen._refresh_layout tells them, less the Show events
                changed = widget._size_updated(geometry.region.size, geometry.virtual_size, geometry.container_size)
                if changed or widget in shown:
                    resized[widget] = Resize(geometry.region.size, geometry.virtual_size, geometry.container_size)
            if not _asked_again(view):
                break
        for widget, event in resized.items():
            widget.post_message(event)
        screen = view.screen
        kept, focused = screen._compositor, screen.focused
        screen._compositor = compositor  # a widget reads its region (its size as drawn) from its screen's compositor
        if focus is not None:  # set unseen: no focus event, no restyle (focus_look.style_for_focus styled it)
            screen.set_reactive(Screen.focused, focus)
            focus.set_reactive(Widget.has_focus, True)
        for widget in compositor.widgets:  # each drawn through its own caches too (a table's lines per state: the
            widget._styles_cache.clear()  # focus a view key gives refreshes the widget, which then reads those)
        try:
            compositor.render_update(full=True)  # each widget's lines, kept until it changes; the result goes nowhere
        finally:
            screen._compositor = kept
            if focus is not None:
                focus.set_reactive(Widget.has_focus, False)
                screen.set_reactive(Screen.focused, focused)
        return True

    def lay_out(self, screen: Screen[Any], size: Size, again: bool = True) -> bool:
        """Lay out ``screen`` (installed, not on the stack: nothing is written to the terminal) at ``size`` until its
        widgets ask for no other layout, and draw each of its widgets once (their lines kept until they change);
        ``again`` False: only if a widget asked for one since. Whether it was laid out.

        A layout that shows a scrollbar narrows what it scrolls: those widgets ask for a layout again, which Textual
        did at the screen's first showing, on its key's path (the help's whole text measured again: the first `?`,
        30 ms more than a later one). Laid out here until they ask no more."""
        if not size or self.failed is not None or stopping(screen.app):
            return False
        try:
            if not (again or screen._layout_required):  # (a screen not on top keeps what its widgets asked for)
                return False
            for _ in range(LAYOUTS_MAX):
                screen._layout_required = False  # what it asked for is being done
                screen._refresh_layout(size)
                if not _asked_again(screen):
                    break
            screen._compositor.render_update(full=True)
            return True
        except Exception as err:  # noqa: BLE001 - private Textual API, as draw
            self.failed = err
            return False

    def forget(self, view: Widget | None = None) -> None:
        if view is None:
            self._compositors.clear()
        else:
            self._compositors.pop(view, None)
