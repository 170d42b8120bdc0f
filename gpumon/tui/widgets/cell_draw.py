"""A table cell of one line, drawn to the segments DataTable's rich render gives it.

DataTable draws each cell through the console: ``render_lines(Styled(Padding(cell, (0, pad)), pre, post))``, the
console's options, the padding's own render of the text and two passes splitting and cropping the lines. A
process's SM% and memory change each sample: those two cells' renders were most of what the process table cost
an idle tick. Here the same steps are taken on the cell's text alone (rich's own wrap, justify and render), then
padded and styled as Padding and Styled do.
"""

from __future__ import annotations

from itertools import islice

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

_NULL = Style.null()  # Padding's style ("none")


def cell_line(console: Console, text: Text, width: int, pad: int, pre: Style, post: Style) -> list[Segment]:
    """The one line of ``text`` (no newline or tab in it) in a cell ``width`` wide with ``pad`` cells each side,
    under ``pre`` and over ``post``: DataTable's segments for it in a row one line high."""
    inner = max(0, width - 2 * pad)
    lines = text.wrap(
        console,
        inner,
        justify=text.justify or "default",
        overflow=text.overflow or "fold",
        tab_size=text.tab_size or console.tab_size or 8,
        no_wrap=True,
    )
    rendered = Text("\n").join(lines).render(console, end=text.end)
    found = list(
        islice(Segment.split_and_crop_lines(rendered, inner, include_new_lines=False, pad=True, style=_NULL), 1)
    )
    line = found[0] if found else [Segment(" " * inner, _NULL)]
    side = [Segment(" " * pad, _NULL)] if pad else []
    styled = list(Segment.apply_style([*side, *line, *side], pre, post))
    return Segment.adjust_line_length(styled, width)
