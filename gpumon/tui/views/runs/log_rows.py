"""A log line as the full-screen log draws it: parsed for its colours only, then chopped at a column or folded
into rows of the width, as ``less -S`` and ``less`` show it.

A line is the run's output, never markup: ``visible_log`` shows every escape but a colour as text (``^[``), and
``Text.from_ansi`` reads the colours. Parsing a 64 KB line of colours takes ~20 ms, so each line's parse is kept
(the lines on screen are drawn again at every key). Columns are terminal cells: a wide character takes two.
"""

from __future__ import annotations

from functools import lru_cache

from rich.cells import cell_len, get_character_cell_size
from rich.text import Text

from gpumon.core.visible import visible_log

PARSE = 4_000  # characters parsed past the last column shown (colour codes take some, a screen row shows fewer)
KEPT = 512  # lines whose parse is kept: a few screens' worth


@lru_cache(maxsize=KEPT)
def _parsed(line: str, limit: int | None) -> Text:
    text = Text.from_ansi(visible_log(line if limit is None else line[:limit], colour=True).expandtabs(), end="")
    text.no_wrap = True
    return text


def parsed(line: str, columns: int | None = None) -> Text:
    """``line`` as drawn (a copy: the caller may highlight it), at least its first ``columns`` (None: all of it).
    The parse is kept per length asked, rounded up to PARSE characters, so scrolling sideways reuses it."""
    limit = None if columns is None else PARSE * (1 + columns // PARSE)
    return _parsed(line, None if limit is None or limit >= len(line) else limit).copy()


def char_at(plain: str, column: int) -> int:
    """The index of the character at ``column`` (cells from the line's start; past the end: the length)."""
    if plain.isascii():
        return min(column, len(plain))
    width = 0
    for index, char in enumerate(plain):
        width += get_character_cell_size(char)
        if width > column:
            return index
    return len(plain)


def fold_starts(plain: str, width: int) -> list[int]:
    """Where each row of ``plain`` folded at ``width`` columns starts (characters; one row for an empty line)."""
    width = max(1, width)
    if plain.isascii():
        return list(range(0, max(1, len(plain)), width))
    starts, column = [0], 0
    for index, char in enumerate(plain):
        cells = get_character_cell_size(char)
        if column + cells > width and column:
            starts.append(index)
            column = 0
        column += cells
    return starts


@lru_cache(maxsize=KEPT)
def row_count(line: str, width: int) -> int:
    """The rows ``line`` takes folded at ``width`` columns."""
    return len(fold_starts(_parsed(line, None).plain, width))


def folded(text: Text, width: int) -> list[Text]:
    """``text`` as rows of ``width`` columns, cut at the column, not at a word (as a terminal and less wrap)."""
    starts = fold_starts(text.plain, width)
    return list(text.divide(starts[1:]))


def chopped(text: Text, left: int, width: int) -> Text:
    """The ``width`` columns of ``text`` from column ``left`` (as ``less -S`` shifted), an ellipsis where it goes on."""
    if left:
        text = text[char_at(text.plain, left) :]
    text.truncate(width, overflow="ellipsis")
    return text


def columns_of(line: str) -> int:
    """The width of the whole line in columns."""
    return cell_len(_parsed(line, None).plain)
