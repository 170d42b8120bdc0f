"""The Runs detail's one bar of where the step's time goes (core/runs/reading/time_split.py): GPU busy, waiting
for data, host, with what is not measured left blank and said so."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from gpumon.core.runs.reading.time_split import SPLIT_KEYS, split_parts

BAR = 24  # cells
STYLES = {"gpu_busy": "green", "data": "yellow", "host": "magenta", "sync": "red"}
GLYPHS = {"gpu_busy": "█", "data": "▓", "host": "▒", "sync": "▒"}  # told apart without colour too


def time_bar(split: dict[str, Any] | None, width: int = BAR) -> Text | None:
    """ "step time ████████▓▓▓▓▒▒░░ GPU busy 62% · data 30% · host 8% · sync ?" (blank cells: not measured)."""
    if not split or not any(isinstance(split.get(k), int | float) for k in SPLIT_KEYS):
        return None
    line = Text("step time ", style="dim")
    used = 0
    for key in SPLIT_KEYS:
        value = split.get(key)
        if isinstance(value, int | float) and value > 0:
            cells = min(width - used, round(value * width))
            line.append(GLYPHS[key] * cells, style=STYLES[key])
            used += cells
    line.append("░" * (width - used), style="dim")
    line.append(" ")
    for i, (key, words) in enumerate(split_parts(split)):
        if i:
            line.append(" · ", style="dim")
        line.append(words, style=STYLES[key] if isinstance(split.get(key), int | float) else "dim")
    if split.get("device") == "cpu":
        line.append(" (a CPU run: the host computes the step)", style="dim")
    return line
