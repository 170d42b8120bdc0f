"""What the footer (widgets/footer.py) takes from Textual's Footer beyond its public face.

``FooterKey`` is public in use (Footer composes it) but lives in the private ``textual.widgets._footer``: where
it moved, the class stands in for one that never matches, and the footer measures its keys as other widgets.
"""

from __future__ import annotations

from textual.widget import Widget
from textual.widgets import Footer

try:
    from textual.widgets._footer import FooterKey
except ImportError:  # moved: no widget is a FooterKey (measured as any widget)

    class FooterKey(Widget):  # type: ignore[no-redef]
        pass


__all__ = ["FooterKey", "asks_no_layout", "bindings_ready", "set_bindings_ready"]


def bindings_ready(footer: Footer) -> bool:
    """The screen has told the footer its bindings at least once (Footer's own flag); True where unknown."""
    return bool(getattr(footer, "_bindings_ready", True))


def set_bindings_ready(footer: Footer) -> None:
    """As Footer's ``bindings_changed`` does (a reactive that recomposes Textual's own footer)."""
    if hasattr(footer, "_bindings_ready"):
        footer._bindings_ready = True


def asks_no_layout(widget: Widget) -> None:
    """A display change of ``widget`` whose layout its parent asks for: the widget's own request would reach the
    screen after the frame and cost a second layout of it. Where the flag moved, the second layout comes."""
    if hasattr(widget, "_layout_required"):
        widget._layout_required = False
