"""A widget's ``rich_style`` kept until a style of it or of a widget above it changes.

``DOMNode.rich_style`` walks every ancestor's colours each time it is read (~0.1 ms on this machine): the GPU
panels read it for the style under their lines and DataTable for each line it draws, every sample, though no
style had changed. Kept as Textual keeps its own ``visual_style`` (on the styles' update counts), here with the
ancestors' counts too, so a theme or a class changed above the widget is seen. ``background_colors`` (the same walk,
read by Textual for each widget it draws in a frame, and by DataTable for each row line) is kept the same way.
"""

from __future__ import annotations

from typing import cast

from rich.style import Style
from textual.color import Color
from textual.dom import DOMNode


class KeptStyle:
    """Mixed in before the widget's class (not a DOMNode itself: Textual follows a class's first DOMNode base for
    its CSS and component classes)."""

    works = True  # False once the styles' update count (private) was found moved: read anew each time
    _kept_style: tuple[tuple[int, ...], Style] | None = None
    _kept_backgrounds: tuple[tuple[int, ...], tuple[Color, Color]] | None = None

    def _styles_key(self) -> tuple[int, ...] | None:
        """The update counts of the styles of the widget and every widget above it; None where unknown."""
        if KeptStyle.works:
            try:
                return tuple(n.styles._cache_key for n in cast(DOMNode, self).ancestors_with_self)
            except AttributeError:
                KeptStyle.works = False
        return None

    @property
    def rich_style(self) -> Style:
        key = self._styles_key()
        kept = self._kept_style
        if key is None or kept is None or kept[0] != key:
            kept = self._kept_style = (key or (), cast(Style, super().rich_style))  # type: ignore[misc]
        return kept[1]

    @property
    def background_colors(self) -> tuple[Color, Color]:
        key = self._styles_key()
        kept = self._kept_backgrounds
        if key is None or kept is None or kept[0] != key:
            kept = self._kept_backgrounds = (key or (), cast(tuple[Color, Color], super().background_colors))  # type: ignore[misc]
        return kept[1]
