"""A log line as the full-screen log draws it: parsed for its colours only, then chopped at a column or folded
into rows of the width, as ``less -S`` and ``less`` show it.

A line is the run's output, never markup: ``visible_log`` shows every escape but a colour as text (``^[``), and
``Text.from_ansi`` reads the colours. Columns are terminal cells: a wide character takes two. A line's rows and
width are counted on its text with the colours dropped by a regex (a 64 KB line of colours: 5 ms, against 70 ms
to parse it and ~860 KB held), the same text the parse shows (tabs expanded after the colours are read).
"""

from __future__ import annotations

from functools import lru_cache

from rich.cells import cell_len, get_character_cell_size
from rich.text import Text

from gpumon.core.visible import visible_log

PARSE = 4_000  # characters parsed past the last column shown (colour codes take some, a screen row shows fewer)
COUNTED = 128  # lines whose rows and width are kept (each count holds its line: 8 MB at most)


def parse_limit(line: str, columns: int | None) -> int | None:
    """How much of ``line`` to parse to show its first ``columns`` (None: all of it), rounded up to PARSE
    characters so that scrolling sideways parses it again only every PARSE characters."""
    limit = None if columns is None else PARSE * (1 + columns // PARSE)
    return None if limit is None or limit >= len(line) else limit


def parse(line: str, limit: int | None) -> Text:
    """``line`` (its first ``limit`` characters) as drawn: colours read, every other control shown."""
    text = Text.from_ansi(visible_log(line if limit is None else line[:limit], colour=True), end="")
    text.expand_tabs()
    text.no_wrap = True
    return text


def _plain(line: str) -> str:
    return visible_log(line, colour=False).expandtabs()


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


@lru_cache(maxsize=COUNTED)
def row_count(line: str, width: int) -> int:
    """The rows ``line`` takes folded at ``width`` columns."""
    return len(fold_starts(_plain(line), width))


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


@lru_cache(maxsize=COUNTED)
def columns_of(line: str) -> int:
    """The width of the whole line in columns (``→`` asks it of every line on screen)."""
    return cell_len(_plain(line))
