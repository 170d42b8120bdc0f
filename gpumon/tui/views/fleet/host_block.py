"""One host of the Fleet view: a header line (name, link in words, totals) and a compact line per GPU.

Drawn through Textual's line API from frozen ``HostLines``: a row whose values did not change keeps its
strip and is not repainted, and a host off screen makes no lines at all, so 16 hosts x 8 GPUs cost what
the few rows that move on screen cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.events import Click, Resize
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from gpumon.core.fleet.lines import GpuLine, HostLines, host_lines
from gpumon.core.fleet.model import HostState
from gpumon.core.format import NA, elide, num, percent
from gpumon.tui.widgets.focus_look import FocusLook
from gpumon.tui.widgets.gpu_panels import text_strip
from gpumon.tui.widgets.render import bar_pieces, level_style, short_run_id

LINK_STYLE = {"live": "green", "connecting": "cyan", "stale": "yellow", "down": "bold red"}
WIDE = 110  # content columns from which the bars and names get room
MARGIN = 1  # blank columns at a block's right, before the list's scrollbar


def _gib(used: int | None, total: int | None, wide: bool) -> str:
    if used is None or total is None:
        return NA
    digits = 1 if wide else 0
    return f"{used / 1024**3:.{digits}f}/{total / 1024**3:.{digits}f}" + (" GiB" if wide else "G")


def gpu_pieces(g: GpuLine, width: int) -> list[tuple[str, str]]:
    """One GPU as (text, style) pieces: index, name, util bar, memory bar and used/total, temperature, power,
    who, which run. Pieces, not a Text: the view turns them into segments directly (many lines a second)."""
    wide = width >= WIDE
    bar_w, name_w, mem_w = (20, 12, 15) if wide else (5, 9, 7)
    out = [(f"{g.index:>2} ", ""), (elide(g.name, name_w).ljust(name_w) + " ", "")]
    if g.state != "ok":
        out.append((g.state.upper(), "bold red"))
        return out
    out += bar_pieces(g.util, bar_w, "cyan")
    out.append((f"{percent(g.util):>4} ", ""))
    out += bar_pieces(g.mem_percent, bar_w, level_style(g.mem_percent, 80, 95))
    out.append((f" {_gib(g.mem_used, g.mem_total, wide):>{mem_w}} ", ""))
    out.append((f"{num(g.temperature, '°C'):>4} ", level_style(g.temperature, 80, 90)))
    out.append((f"{num(g.power, 'W'):>5} ", ""))
    room = width - sum(cell_len(text) for text, _ in out)
    run = short_run_id(g.run) if g.run else ""
    who_w = room - (len(run) + 1 if run else 0)
    if wide:
        who_w = min(who_w, 48)  # the run stays near its process, not at the far right
    if g.idle:
        out.append((elide("idle", who_w).ljust(who_w), "green"))
    else:
        more = f" +{g.processes - 1}" if g.processes > 1 else ""
        who = f"{g.user or NA} {g.command or NA}{more}" if g.processes else "no process shown"
        out.append((elide(who, who_w).ljust(who_w), "dim" if not g.processes else ""))
    if run:
        out.append((" " + run, "bold cyan"))
    return out


def gpu_text(g: GpuLine, width: int, dim: bool) -> Text:
    """The same line as a Text (bold throughout, dimmed for a host whose values are not live)."""
    line = Text.assemble(*gpu_pieces(g, width), style="bold")
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


class HostBlock(FocusLook, Widget):
    """A host's header and GPU lines; focus selects it (enter then opens it).

    Each row keeps its strip until its value changes; a few changed rows are marked for repaint one by
    one, most of them as the whole block (cheaper for Textual), and either way only the changed rows are
    made again. A block off screen makes no lines until scrolled to."""

    can_focus = True

    class Clicked(Message):
        def __init__(self, block: HostBlock) -> None:
            self.block = block
            super().__init__()

    def __init__(self, name: str, id: str) -> None:
        super().__init__(id=id, classes="host-block")
        self.host_name = name
        self.state: HostState | None = None
        self._pids: Mapping[int, str] | None = None
        self._host: HostLines | None = None  # made from ``state`` when needed
        self._rows: list[Strip | None] = []  # this width's strips; None: to be made
        self._waiting = False  # marked for a repaint that has not been drawn yet (off screen)
        self._base: Style | None = None
        self._width = 0

    @property
    def host(self) -> HostLines | None:
        if self._host is None and self.state is not None:
            self._host = host_lines(self.state, self._pids)
        return self._host

    def show(self, state: HostState, pids: Mapping[int, str] | None = None, in_view: bool = True) -> None:
        """The host's newest state; only the rows whose values changed are repainted. ``in_view``: the
        block shows in its list's window (the list knows; asking Textual would lay out every widget)."""
        if state is self.state and pids == self._pids:
            return
        self.state, self._pids = state, pids
        rows = host_rows(state)
        if self.styles.height is None or self.styles.height.value != rows:
            self.styles.height = rows
        old = self._host
        if old is None or not in_view:  # made when it scrolls into view
            self._host, self._rows = None, []
            if not self._waiting:  # once: Textual keeps it marked for repaint until it is drawn
                self._waiting = True
                self.refresh()
            return
        new = self._host = host_lines(state, pids)
        changed = _changed_rows(old, new)
        if changed is None or len(self._rows) != len(_row_keys(new)):
            self.repaint_all()
            return
        for y in changed:
            self._rows[y] = None
        if len(changed) * 3 >= len(self._rows):  # most rows: one refresh costs Textual less than many regions
            self.refresh()  # (the unchanged rows keep their strips: render_line hands them back)
        elif changed:
            width = self.size.width
            self.refresh(*(Region(0, y, width, 1) for y in changed))

    def repaint_all(self) -> None:
        self._rows, self._base = [], None
        self.refresh()

    def notify_style_update(self) -> None:
        self._rows, self._base = [], None  # a theme or CSS change: the strips carry the old colours
        super().notify_style_update()

    @property
    def base_style(self) -> Style:
        """The widget's own Rich style, kept: Textual works it out from the CSS on every call (~90 µs)."""
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def on_focus(self) -> None:
        self.repaint_all()  # the header shows the selection

    def on_blur(self) -> None:
        self.repaint_all()

    def on_resize(self, event: Resize) -> None:
        self._rows = []

    def on_click(self, event: Click) -> None:
        self.post_message(self.Clicked(self))

    def render_line(self, y: int) -> Strip:
        self._waiting = False
        width = self.content_size.width
        if width != self._width or not self._rows:
            self._width = width
            self._rows = [None] * len(_row_keys(self.host))
        if y >= len(self._rows):
            return Strip.blank(width, self.base_style)
        strip = self._rows[y]
        if strip is None:
            strip = self._rows[y] = self._make_row(y, width)
        return strip

    def _make_row(self, y: int, width: int) -> Strip:
        """A row's strip: its content, then the block's right margin (drawn here: Textual's padding would
        cost a pass over every line's segments)."""
        strip = self._content_row(y, width - MARGIN)
        return Strip([*strip, Segment(" " * MARGIN, self.base_style)], width)

    def _content_row(self, y: int, width: int) -> Strip:
        h = self.host
        if h is None:
            return self._text_strip(Text(f"  {self.host_name}  waiting…", style="dim"), width)
        if y == 0:
            return self._text_strip(header_text(h, width, self.has_focus), width)
        if y <= len(h.gpus):
            return self._gpu_strip(h.gpus[y - 1], width, h.link in ("stale", "down"))
        style = "dim italic" if h.link != "down" else "red"
        return self._text_strip(Text(f"   {h.note}", style=style), width)

    def _text_strip(self, line: Text, width: int) -> Strip:
        return text_strip(line, width, self.app.console, self.base_style)

    def _gpu_strip(self, g: GpuLine, width: int, dim: bool) -> Strip:
        """Segments straight from the pieces (no Text to lay out), styled as ``gpu_text`` would style them."""
        pieces = gpu_pieces(g, width)
        used = sum(cell_len(text) for text, _ in pieces)
        if used > width:  # cut with an ellipsis, as any other line
            return self._text_strip(gpu_text(g, width, dim), width)
        base = self.base_style
        segments = [Segment(text, _style(base, name, dim)) for text, name in pieces if text]
        if used < width:
            segments.append(Segment(" " * (width - used), _style(base, "", False)))
        return Strip(segments, width)


def host_rows(state: HostState) -> int:
    """A block's height: a header and a line per GPU, or the header and the note why there is none."""
    return max(2, 1 + len(state.gpus))


def _row_keys(h: HostLines | None) -> list[object]:
    """What each row shows: the header's values, each GPU line (and whether it is dimmed), the note."""
    if h is None:
        return [None]
    dim = h.link in ("stale", "down")
    keys: list[object] = [(h.name, h.link, h.words, h.simulated, h.busy, h.idle, h.memory())]
    keys += [(g, dim) for g in h.gpus]
    if h.note:
        keys.append((h.note, h.link == "down"))
    return keys


def _changed_rows(old: HostLines, new: HostLines) -> list[int] | None:
    """The rows whose values differ; None when the rows themselves differ (a GPU came or went, a note)."""
    before, after = _row_keys(old), _row_keys(new)
    if len(before) != len(after):
        return None
    return [y for y, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]


@lru_cache(maxsize=256)
def _style(base: Style, name: str, dim: bool) -> Style:
    """The widget's style, then ``bold`` (the line's own), the piece's, and ``dim`` for a host not live."""
    style = base + Style.parse("bold") + (Style.parse(name) if name else Style())
    return style + Style.parse("dim") if dim else style
