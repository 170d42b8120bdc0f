"""A panel line as (text, style) pieces, drawn straight to a Strip.

The GPU and host panels draw each of their lines anew every sample (a sparkline moves a column, a value changes).
Through rich's Text (build, truncate, render to segments, apply the widget's style) a line cost ~0.1-0.3 ms, most
of the panels' share of an idle tick; the same segments made here from the pieces cost a few string joins. What
comes out is what Text drew: one segment per styled piece, the unstyled runs between them joined, the line's own
style under each (and, as rich does, no style at all where no piece has one). A line wider than its room goes
through Text, for its ellipsis.
"""

from __future__ import annotations

from functools import lru_cache

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

Piece = tuple[str, str]  # text, rich style ("" for none)


class Line:
    """A line's pieces and the style under all of them (rich's ``Text(text, style=...)`` + ``append``)."""

    __slots__ = ("pieces", "style")

    def __init__(self, text: str = "", style: str = "") -> None:
        self.style = style
        self.pieces: list[Piece] = [(text, "")] if text else []

    def append(self, text: str, style: str = "") -> Line:
        if text:
            self.pieces.append((text, style))
        return self

    def extend(self, pieces: list[Piece]) -> Line:
        for text, style in pieces:
            self.append(text, style)
        return self

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.pieces)

    def text(self) -> Text:
        """The same line as rich Text."""
        line = Text(style=self.style)
        for text, style in self.pieces:
            line.append(text, style=style or None)
        return line

    def strip(self, width: int, console: Console, base: Style) -> Strip:
        """Cut with an ellipsis or padded to ``width``, on the widget's style ``base`` (as ``text_strip``)."""
        plain = self.plain
        length = cell_len(plain)
        if length > width:  # rich cuts it (a narrow terminal)
            return text_strip(self.text(), width, console, base)
        pad = " " * (width - length)
        if not any(style for _, style in self.pieces):  # rich draws a line with no styled piece unstyled
            return Strip([Segment(plain + pad, base)], width)
        segments: list[Segment] = []
        run = ""  # unstyled pieces since the last styled one: one segment, on the line's style
        for text, style in self.pieces:
            if not style:
                run += text
                continue
            if run:
                segments.append(Segment(run, _style(console, base, self.style, "")))
                run = ""
            segments.append(Segment(text, _style(console, base, self.style, style)))
        run += pad
        if run:
            segments.append(Segment(run, _style(console, base, self.style, "")))
        return Strip(segments, width)


@lru_cache(maxsize=512)
def _style(console: Console, base: Style, line: str, piece: str) -> Style:
    """``base`` + the line's style + the piece's, as rich's Text.render and Segment.apply_style combine them."""
    under = console.get_style(line, default=Style.null())
    return base + (under + console.get_style(piece, default=Style.null()) if piece else under)


def text_strip(line: Text, width: int, console: Console, base: Style) -> Strip:
    """One line of a line-API widget: cut with an ellipsis or padded to ``width``, on the widget's style."""
    line.truncate(width, overflow="ellipsis", pad=True)
    return Strip(Segment.apply_style(line.render(console), base), width)
