"""Braille line charts of a value per iteration (loss, memory), downsampled to the widget's width.

Each character cell holds 2x4 Braille dots. A series is bucketed by step into
dot columns; each column draws the min..max of its bucket joined to the
previous column, so a spike or a drop inside a bucket still shows. Sorted
steps (the usual case) are bucketed with bisect and C-level min/max, so 20 000
points cost about a millisecond. With ``log`` the y axis is log10 (a loss falling from 4.2 to 0.02
stays readable): values <= 0 cannot be drawn there and are skipped (``nonpositive`` counts them, for
the owner's note), and the axis reads "log" under its labels.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from rich.text import Text
from textual.widget import Widget

BRAILLE = 0x2800
# dot bit for (x, y) inside a cell: x in 0..1, y in 0..3 (top to bottom)
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
SERIES_STYLES = ("green", "cyan", "magenta", "yellow", "blue", "red", "bright_green", "bright_cyan")
AXIS_STYLE = "bright_black"


Bucket = tuple[float, float, float, float]  # first, last, min, max


@dataclass(frozen=True)
class Series:
    steps: Sequence[int]
    values: Sequence[float]
    style: str = "green"


def _columns(steps: Sequence[int], values: Sequence[float], lo: float, span: float, dots: int) -> list[Bucket | None]:
    """Per dot column: (first, last, min, max) of the values whose step falls in it, or None."""
    out: list[Bucket | None] = [None] * dots
    scale = (dots - 1) / span if span > 0 else 0.0
    ordered = all(a <= b for a, b in pairwise(steps))
    if ordered and span > 0:
        start = 0
        for col in range(dots):
            end = bisect_left(steps, lo + (col + 0.5) / scale, start) if col < dots - 1 else len(steps)
            if end > start:
                chunk = values[start:end]
                out[col] = (chunk[0], chunk[-1], min(chunk), max(chunk))
                start = end
        return out
    for i, (step, value) in enumerate(zip(steps, values, strict=False)):
        col = (
            min(dots - 1, max(0, round((step - lo) * scale))) if span > 0 else i * (dots - 1) // max(1, len(values) - 1)
        )
        cell = out[col]
        out[col] = (
            (value, value, value, value) if cell is None else (cell[0], value, min(cell[2], value), max(cell[3], value))
        )
    return out


def _clean(series: Series) -> Series:
    """Drop non-finite values (a NaN loss must not break the scale)."""
    if all(math.isfinite(v) for v in series.values):
        return series
    pairs = [(s, v) for s, v in zip(series.steps, series.values, strict=False) if math.isfinite(v)]
    return Series(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), series.style)


def nonpositive(series: Sequence[Series]) -> int:
    """How many finite values are <= 0: a log axis skips them."""
    return sum(1 for s in series for v in s.values if v <= 0 and math.isfinite(v))


def _log(series: Series) -> Series:
    pairs = [(s, math.log10(v)) for s, v in zip(series.steps, series.values, strict=False) if v > 0]
    return Series(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), series.style)


def line_chart(
    series: Sequence[Series],
    width: int,
    height: int,
    fmt: Callable[[float], str],
    empty: str = "no data yet",
    log: bool = False,
) -> list[Text]:
    """``height`` lines of ``width`` cells: y labels (max top, min bottom; ``log``: and the middle), the plot,
    and a step axis."""
    data = [s for s in map(_clean, series) if len(s.values)]
    if log:
        data = [s for s in map(_log, data) if len(s.values)]
        empty = "no value above 0 to draw on a log axis" if any(len(s.values) for s in series) else empty
        linear = fmt
        fmt = lambda y: linear(10**y)  # noqa: E731  the labels say values, not their logarithms
    if width < 8 or height < 2 or not data:
        lines = [Text(" " * max(0, width)) for _ in range(max(0, height))]
        if lines:
            lines[len(lines) // 2] = Text(empty[:width].center(width), style="dim")
        return lines
    y_lo = min(min(s.values) for s in data)
    y_hi = max(max(s.values) for s in data)
    if y_hi == y_lo:
        pad = abs(y_lo) * 0.05 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    x_lo = min(min(s.steps) for s in data)
    x_hi = max(max(s.steps) for s in data)
    top, bottom = fmt(y_hi), fmt(y_lo)
    plot_h = height - 1
    middle_row = plot_h // 2 if log and plot_h >= 3 else -1
    middle = fmt(y_hi - (y_hi - y_lo) * middle_row / max(1, plot_h - 1)) if middle_row > 0 else ""
    label_w = max(len(top), len(bottom), len(middle), 3 if log else 0)
    plot_w = width - label_w - 1
    if plot_w < 2:
        return [Text(" " * width) for _ in range(height)]
    dots_w, dots_h = plot_w * 2, plot_h * 4
    masks = [[0] * plot_w for _ in range(plot_h)]
    styles: list[list[str | None]] = [[None] * plot_w for _ in range(plot_h)]

    def row_of(value: float) -> int:
        return round((y_hi - value) / (y_hi - y_lo) * (dots_h - 1))

    def draw(col: int, low: float, high: float, style: str) -> None:
        for dot_row in range(row_of(high), row_of(low) + 1):
            cy, cx = dot_row // 4, col // 2
            masks[cy][cx] |= _DOTS[col % 2][dot_row % 4]
            styles[cy][cx] = style

    for s in data:
        previous: tuple[int, float] | None = None  # the last column drawn and its last value
        for col, cell in enumerate(_columns(s.steps, s.values, x_lo, x_hi - x_lo, dots_w)):
            if cell is None:
                continue
            first, last, low, high = cell
            if previous is not None:
                before, value = previous
                for gap in range(before + 1, col):  # fewer points than dots: join them with a line
                    between = value + (first - value) * (gap - before) / (col - before)
                    draw(gap, min(between, value), max(between, value), s.style)
                    value = between
                low, high = min(low, value), max(high, value)
            draw(col, low, high, s.style)
            previous = (col, last)
    lines = []
    for y in range(plot_h):
        label = top if y == 0 else bottom if y == plot_h - 1 else middle if y == middle_row else ""
        line = Text(label.rjust(label_w), style=AXIS_STYLE)
        line.append("┤" if label else "│", style=AXIS_STYLE)
        for x in range(plot_w):
            mask = masks[y][x]
            line.append(chr(BRAILLE + mask) if mask else " ", style=styles[y][x] or "")
        lines.append(line)
    left, right = f"{x_lo}", f"step {x_hi}"
    gap = plot_w - len(left) - len(right)
    axis = f"{left}{' ' * gap}{right}" if gap >= 1 else right.rjust(plot_w)[-plot_w:]
    margin = "log".rjust(label_w) + " " if log else " " * (label_w + 1)
    lines.append(Text(margin + axis, style=AXIS_STYLE))
    return lines


class Chart(Widget):
    """A line chart that redraws only when its series or its size change."""

    DEFAULT_CSS = "Chart { height: 1fr; }"

    def __init__(self, fmt: Callable[[float], str], empty: str, id: str | None = None, log_y: bool = False) -> None:
        super().__init__(id=id)
        self.fmt = fmt
        self.empty = empty
        self.log_y = log_y
        self.series: tuple[Series, ...] = ()
        self._cache: tuple[object, Text] | None = None

    def show(self, series: Sequence[Series]) -> None:
        new = tuple(series)
        same = len(new) == len(self.series) and all(
            a.steps is b.steps and a.values is b.values and a.style == b.style
            for a, b in zip(new, self.series, strict=True)
        )
        if not same:
            self.series = new
            self.refresh()

    def set_log(self, log: bool) -> None:
        """The y axis: log10 (True) or linear."""
        if log != self.log_y:
            self.log_y = log
            self.refresh()

    def render(self) -> Text:
        size = (self.content_size.width, self.content_size.height)
        key = (size, self.log_y, tuple((id(s.steps), id(s.values), len(s.values), s.style) for s in self.series))
        if self._cache is None or self._cache[0] != key:
            lines = line_chart(self.series, size[0], size[1], self.fmt, self.empty, self.log_y)
            self._cache = (key, Text("\n").join(lines))
        return self._cache[1]
