"""Rich text pieces shared by the views: bars, sparklines, colour thresholds, run states, numbers."""

from __future__ import annotations

from rich.text import Text

from gpumon.core.doctor.leak import LeakState

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
    return Text.assemble(*bar_pieces(percent, width, style))


def bar_pieces(percent: float | None, width: int, style: str) -> list[tuple[str, str]]:
    """The bar as (text, style) pieces, for a line built from pieces."""
    if width <= 0:
        return []
    if percent is None:
        return [("N/A".center(width), "dim")]
    filled = round(max(0.0, min(100.0, percent)) / 100 * width)
    return [("█" * filled, style), ("·" * (width - filled), "bright_black")]


def sparkline(values: list[float], width: int, style: str, top: float = 100.0) -> Text:
    """The newest ``width`` values as block characters, right-aligned."""
    if width <= 0:
        return Text()
    return Text(spark_chars(values, width, top), style=style)


def spark_chars(values: list[float], width: int, top: float = 100.0) -> str:
    """``sparkline``'s characters ("" for no room)."""
    if width <= 0:
        return ""
    values = values[-width:]
    blocks, low = _BLOCKS, _BLOCKS[1]
    if top <= 0:
        chars = [low for _ in values]
    else:  # each sample drew a whole line of these: one expression, no call per value but round's
        chars = [(blocks[max(1, round(v / top * 8))] if v < top else blocks[8]) if v > 0 else low for v in values]
    return " " * (width - len(chars)) + "".join(chars)


def short_run_id(run_id: str) -> str:
    """'ddp-1121-144756-c132' -> 'ddp-c132': the kind and the random part, for narrow columns."""
    parts = run_id.split("-")
    if len(parts) < 4:
        return run_id
    kind = "-".join(parts[:-3])
    return f"{_KIND_ABBR.get(kind, kind)}-{parts[-1]}"


_KIND_ABBR = {"pipeline": "pipe", "model-parallel": "mp"}


STATE_STYLE = {
    "queued": "cyan",
    "starting": "cyan",
    "running": "bold green",
    "stalled": "bold yellow",
    "stopping": "yellow",
    "failed": "bold red",
    "stopped": "yellow",
    "killed": "yellow",
    "lost": "dim",
    "unsupervised": "bold magenta",
    "exited": "dim",
}


def number(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if 0.001 <= abs(value) < 1000 or value == 0 else f"{value:.3g}"


def leak_style(state: LeakState | None) -> str:
    """The warning colour of a memory trend: red for a leak, yellow while it grows, none otherwise."""
    if state is None or not state.warning:
        return ""
    return "bold red" if state.state == "leak" else "yellow"
