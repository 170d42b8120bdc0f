"""A widget restyled on a focus change only when its look can show it.

Textual restyles a widget and everything under it at each focus change (``:focus`` rules). A view key moves the
focus out of the view it hides and back into the view it shows, and Escape takes it off the launch form as the form
closes: each of those restyled a table (10 nodes with its parts) or the form's first field (11) on the key's path,
~5-9 ms of a 35-60 ms key, for a widget nobody could see (hidden) or whose look was already that of its focus
(focused again before it ever showed unfocused). Here a widget that loses the focus out of sight keeps the look it
had, and a focus change back to the state it is styled for restyles nothing. (A focus gained out of sight, as the
form built ahead focuses its first field, is styled at once: it is off any key's path.)
"""

from __future__ import annotations

from typing import Any

from textual.widget import Widget


def out_of_sight(widget: Widget) -> bool:
    """Hidden with its view (an ancestor not displayed) or on a screen no longer open (a closed form)."""
    app = widget.app
    try:
        screen = widget.screen
    except Exception:  # noqa: BLE001 - not on a screen (any more)
        return True
    if screen not in app.screen_stack:
        return True
    return not all(node.display for node in widget.ancestors_with_self if isinstance(node, Widget))


class FocusLook:
    """Mixed in before a Textual widget class (``class T(FocusLook, DataTable)``)."""

    _styled_focus: bool | None = None  # the focus state its styles were last worked out for; None: not yet

    def watch_has_focus(self, has_focus: bool) -> None:
        assert isinstance(self, Widget)
        if has_focus == self._styled_focus:
            return  # styled for this state already: restyling changes nothing
        if not has_focus and out_of_sight(self):
            return  # restyled once it shows, if the focus it shows with is not the one it is styled for (on_show)
        self._styled_focus = has_focus
        super().watch_has_focus(has_focus)  # type: ignore[misc]

    def notify_style_update(self) -> None:
        """Any restyle (a class, a theme) works the look out for the focus state of now."""
        assert isinstance(self, Widget)
        self._styled_focus = self.has_focus
        super().notify_style_update()  # type: ignore[misc]

    def _on_show(self, event: Any) -> None:  # Textual calls each class's own handler: no super() here
        assert isinstance(self, Widget)
        if self._styled_focus is not None and self.has_focus != self._styled_focus:
            self._styled_focus = self.has_focus  # shown again with another focus than the one it was styled for
            self.update_node_styles()


def style_for_focus(widget: Widget | None) -> None:
    """Style ``widget`` (out of sight, unfocused, styled unfocused) as it looks focused: the key that shows
    its view and focuses it then restyles nothing (the first `r` restyled the Runs table and its parts, 11 nodes,
    on its path; `!` the alerts table; `d`, `h` their focused widget). Before it is drawn unseen (unseen.py)."""
    if not isinstance(widget, FocusLook) or widget._styled_focus or widget.has_focus:
        return
    if not out_of_sight(widget):
        return
    widget.set_reactive(Widget.has_focus, True)
    try:
        widget.app.stylesheet.update_nodes([widget, *widget.walk_children()], animate=False)
    finally:
        widget.set_reactive(Widget.has_focus, False)
    widget._styled_focus = True
