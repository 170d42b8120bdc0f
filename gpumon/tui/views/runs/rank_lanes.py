"""The Runs detail's lane per rank (core/runs/reading/lanes.py): its own work and its wait for the others a step,
side by side, so the slow rank is the one whose lane is all its own work while the others' end in waiting."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from gpumon.core.runs.reading.lanes import FLAG, ms

BAR = 24  # cells: the longest step fills it
MOST = 8  # lanes shown; more ranks: the lowest scores, and how many are left out
OWN, WAIT = ("█", "green"), ("░", "yellow")  # told apart without colour too


def lanes_text(lanes: tuple[dict[str, Any], ...], width: int = BAR) -> Text | None:
    """ "rank 2 ████████████████████████ own 56 ms · wait 3 ms · score 0.27" one line a rank; None with no lanes."""
    if len(lanes) < 2:
        return None
    shown = sorted(lanes, key=lambda lane: lane["score"])[:MOST] if len(lanes) > MOST else list(lanes)
    shown.sort(key=lambda lane: lane["rank"])
    longest = max(float(lane["own_s"]) + float(lane["wait_s"]) for lane in shown) or 1.0
    digits = max(len(str(lane["rank"])) for lane in shown)
    text = Text("own work ", style="dim").append(OWN[0], style=OWN[1]).append(" · wait for the others ", style="dim")
    text.append(WAIT[0], style=WAIT[1]).append(" a step, per rank", style="dim")
    for lane in shown:
        own, wait, score = float(lane["own_s"]), float(lane["wait_s"]), float(lane["score"])
        own_cells = round(own / longest * width)
        wait_cells = min(width - own_cells, round(wait / longest * width))
        slow = score < FLAG
        text.append(f"\nrank {lane['rank']:>{digits}} ", style="bold red" if slow else "")
        text.append(OWN[0] * own_cells, style=OWN[1]).append(WAIT[0] * wait_cells, style=WAIT[1])
        text.append(" " * (width - own_cells - wait_cells))
        text.append(f" own {ms(own)} · wait {ms(wait)} · ", style="dim")
        text.append(f"score {score:.2f}", style="bold red" if slow else "")
    if len(lanes) > len(shown):
        text.append(f"\n+{len(lanes) - len(shown)} more ranks (the lowest scores are shown)", style="dim")
    return text
