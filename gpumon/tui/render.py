"""Rich text pieces (bars, sparklines, colour thresholds) shared by the panels."""

from __future__ import annotations

from rich.text import Text

_BLOCKS = " ▁▂▃▄▅▆▇█"


def level_style(value: float | None, warn: float, crit: float) -> str:
    if value is None:
        return "dim"
    if value >= crit:
        return "bold red"
    if value >= warn:
        return "yellow"
    return "green"


def bar(percent: float | None, width: int, style: str) -> Text:
    """A horizontal bar; '·' marks the empty part so it reads without colour too."""
    if width <= 0:
        return Text()
    if percent is None:
        return Text("N/A".center(width), style="dim")
    filled = round(max(0.0, min(100.0, percent)) / 100 * width)
    return Text.assemble(("█" * filled, style), ("·" * (width - filled), "bright_black"))


def sparkline(values: list[float], width: int, style: str, top: float = 100.0) -> Text:
    """The newest ``width`` values as block characters, right-aligned."""
    if width <= 0:
        return Text()
    values = values[-width:]
    chars = []
    for v in values:
        level = 0 if top <= 0 else round(max(0.0, min(1.0, v / top)) * 8)
        chars.append(_BLOCKS[max(1, level)] if v > 0 else _BLOCKS[1])
    return Text(" " * (width - len(chars)) + "".join(chars), style=style)
