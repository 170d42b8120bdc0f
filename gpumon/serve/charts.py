"""The page's charts as inline SVG, drawn by serve: a line with its axes' values (min and max on the left, the
first and last x at the bottom) and a caption that says the last value, min and max in words, so the chart
reads as text too (a browser without JavaScript, a screen reader, ``curl``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from operator import itemgetter

GUTTER = 46  # px left of the plot: the y axis' values
TOP, BOTTOM = 6, 14  # px above the plot, and below it for the x axis' values
_Y = itemgetter(1)


def thin_xy(points: Sequence[tuple[float, float]], buckets: int) -> list[tuple[float, float]]:
    """At most ``2 * buckets`` points, in order: each bucket's lowest and highest, so a spike survives."""
    if len(points) <= 2 * buckets:
        return list(points)
    out: list[tuple[float, float]] = []
    size = len(points) / buckets
    for i in range(buckets):
        part = points[int(i * size) : int((i + 1) * size)]
        if part:
            lo, hi = min(part, key=_Y), max(part, key=_Y)
            out.extend(sorted({lo, hi}))
    return out


def chart(
    points: Sequence[tuple[float, float]],
    label: str,
    y_text: Callable[[float], str],
    x_text: Callable[[float], str],
    empty: str,
    *,
    series: str,
    width: int = 220,
    height: int = 70,
) -> str:
    """A ``<figure>``: ``label``'s caption with the last value, min and max (``y_text``), and the line with the
    same values on its y axis and the first and last x (``x_text``) on its x axis; ``empty`` under two points."""
    ys = [p[1] for p in points]
    if ys:
        said = f"last {y_text(ys[-1])} · min {y_text(min(ys))} · max {y_text(max(ys))}"
        caption = f"{label}: {said}"
    else:
        caption = f"{label}: {empty}"
    out = [f'<figure class="chart" data-series="{escape(series)}"><figcaption>{escape(caption)}</figcaption>']
    out.append(f'<svg width="{width}" height="{height}" data-points="{len(points)}" aria-hidden="true">')
    if len(points) < 2:
        out.append(f'<text x="6" y="{height // 2}">{escape(empty if not ys else "one point so far")}</text></svg>')
        return "".join(out) + "</figure>"
    drawn = thin_xy(points, (width - GUTTER) // 2)
    x0, x1 = points[0][0], points[-1][0]
    y0, y1 = min(ys), max(ys)
    left, right, top, bottom = GUTTER, width - 4, TOP, height - BOTTOM

    def sx(x: float) -> float:
        return left + (right - left) * (x - x0) / ((x1 - x0) or 1)

    def sy(y: float) -> float:
        return bottom - (bottom - top) * (y - y0) / ((y1 - y0) or 1)

    line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in drawn)
    out += [
        f'<path class="axis" d="M{left - 2},{top}V{bottom}H{right}"/>',
        f'<text class="y" x="{left - 4}" y="{top + 8}" text-anchor="end">{escape(y_text(y1))}</text>',
        f'<text class="y" x="{left - 4}" y="{bottom}" text-anchor="end">{escape(y_text(y0))}</text>',
        f'<text class="x" x="{left}" y="{height - 2}">{escape(x_text(x0))}</text>',
        f'<text class="x" x="{right}" y="{height - 2}" text-anchor="end">{escape(x_text(x1))}</text>',
        f'<polyline points="{line}"/>',
        "</svg></figure>",
    ]
    return "".join(out)
