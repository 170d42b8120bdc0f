"""One host of the Fleet view: a header line (name, link in words, totals) and a compact line per GPU.

Drawn through the line API (``LinePanel``) from frozen ``HostLines``: ``show`` with equal lines costs
a comparison, so 16 hosts x 8 GPUs repaint only the hosts whose values moved.
"""

from __future__ import annotations

from rich.text import Text
from textual.events import Click
from textual.message import Message

from gpumon.core.fleet.lines import GpuLine, HostLines
from gpumon.core.format import NA, elide, num, percent
from gpumon.tui.widgets.gpu_panels import LinePanel
from gpumon.tui.widgets.render import bar, level_style, short_run_id

LINK_STYLE = {"live": "green", "connecting": "cyan", "stale": "yellow", "down": "bold red"}
WIDE = 110  # content columns from which the bars and names get room


def _gib(used: int | None, total: int | None, wide: bool) -> str:
    if used is None or total is None:
        return NA
    digits = 1 if wide else 0
    return f"{used / 1024**3:.{digits}f}/{total / 1024**3:.{digits}f}" + (" GiB" if wide else "G")


def gpu_text(g: GpuLine, width: int, dim: bool) -> Text:
    """One GPU: index, name, util bar, memory bar and used/total, temperature, power, who, which run."""
    wide = width >= WIDE
    bar_w, name_w, mem_w = (20, 12, 15) if wide else (5, 9, 7)
    line = Text(f"{g.index:>2} ", style="bold")
    line.append(elide(g.name, name_w).ljust(name_w) + " ", style="dim" if dim else "")
    if g.state != "ok":
        line.append(f"{g.state.upper()}", style="bold red")
        return line
    line.append_text(bar(g.util, bar_w, "cyan"))
    line.append(f"{percent(g.util):>4} ")
    line.append_text(bar(g.mem_percent, bar_w, level_style(g.mem_percent, 80, 95)))
    line.append(f" {_gib(g.mem_used, g.mem_total, wide):>{mem_w}} ")
    line.append(f"{num(g.temperature, '°C'):>4} ", style=level_style(g.temperature, 80, 90))
    line.append(f"{num(g.power, 'W'):>5} ")
    room = width - line.cell_len
    run = short_run_id(g.run) if g.run else ""
    who_w = room - (len(run) + 1 if run else 0)
    if wide:
        who_w = min(who_w, 48)  # the run stays near its process, not at the far right
    if g.idle:
        line.append(elide("idle", who_w).ljust(who_w), style="green")
    else:
        more = f" +{g.processes - 1}" if g.processes > 1 else ""
        who = f"{g.user or NA} {g.command or NA}{more}" if g.processes else "no process shown"
        line.append(elide(who, who_w).ljust(who_w), style="dim" if not g.processes else "")
    if run:
        line.append(" " + run, style="bold cyan")
    if dim:
        line.stylize("dim")
    return line


def header_text(h: HostLines, width: int, selected: bool) -> Text:
    """'▶ gpu1  live 23 ms  SIMULATED        3 busy · 1 idle · 120/320G'."""
    line = Text("▶ " if selected else "  ", style="bold")
    line.append(h.name, style="bold underline" if selected else "bold")
    line.append("  ")
    line.append(h.words, style=LINK_STYLE.get(h.link, ""))
    if h.simulated:
        line.append("  SIMULATED", style="yellow")
    used, total = h.memory()
    totals = f"{h.busy} busy · {h.idle} idle · {_gib(used, total, width >= WIDE)}" if h.gpus else ""
    gap = width - line.cell_len - len(totals)
    if totals and gap >= 2:
        line.append(" " * gap + totals, style="dim")
    if selected:
        line.stylize("reverse")
    return line


class HostBlock(LinePanel):
    """A host's header and GPU lines; focus selects it (enter then opens it)."""

    can_focus = True

    class Clicked(Message):
        def __init__(self, block: HostBlock) -> None:
            self.block = block
            super().__init__()

    def __init__(self, name: str, id: str) -> None:
        super().__init__(id=id, classes="host-block")
        self.host_name = name
        self.host: HostLines | None = None

    def show(self, host: HostLines) -> None:
        """Repaint only when the values changed."""
        if host == self.host:
            return
        self.host = host
        rows = max(2, 1 + len(host.gpus) + (1 if host.note else 0))
        if self.styles.height is None or self.styles.height.value != rows:
            self.styles.height = rows
        self.refresh_lines()

    def on_focus(self) -> None:
        self.refresh_lines()

    def on_blur(self) -> None:
        self.refresh_lines()

    def on_click(self, event: Click) -> None:
        self.post_message(self.Clicked(self))

    def lines(self, width: int) -> list[Text]:
        h = self.host
        if h is None:
            return [Text(f"  {self.host_name}  waiting…", style="dim")]
        dim = h.link in ("stale", "down")  # the last values known, not live ones
        out = [header_text(h, width, self.has_focus)]
        out.extend(gpu_text(g, width, dim) for g in h.gpus)
        if h.note:
            out.append(Text(f"   {h.note}", style="dim italic" if h.link != "down" else "red"))
        return out
