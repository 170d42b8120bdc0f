"""GPU and host panels. Each holds the latest values the app hands it and
renders them to its current width; none reads a source itself."""

from __future__ import annotations

from textual.events import Click, Resize
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from gpumon.core.format import NA, elide, gib_pair, num, percent
from gpumon.core.model import GpuDevice, HostSample
from gpumon.tui.textual_private.kept_style import KeptStyle
from gpumon.tui.textual_private.repaint import Coalesced
from gpumon.tui.widgets.line import Line, text_strip
from gpumon.tui.widgets.literal import set_title
from gpumon.tui.widgets.render import bar_pieces, level_style, spark_chars

__all__ = ["GpuPanel", "HostPanel", "LinePanel", "compact_line", "gpm_line", "text_strip"]

_LABEL = 5
_VALUE = 19  # a meter's value column, at least: wider where a panel's values need it (fit_value)
_BAR_MIN = 8


def _history_width(width: int, value: int = _VALUE) -> int:
    return max(0, width - _LABEL - _bar_width(width, value) - value - 2)


def _bar_width(width: int, value: int = _VALUE) -> int:
    return max(_BAR_MIN, min(30, (width - _LABEL - value - 2) // 2))


def value_width(values: list[str], width: int) -> int:
    """The value column of a panel's meters: as wide as its widest value (all its bars line up), within what the
    panel's width leaves beside the least bar."""
    return max(1, min(max([_VALUE, *map(len, values)]), width - _LABEL - _BAR_MIN - 2))


def whole_words(text: str, width: int) -> str:
    """``text`` in ``width`` columns, cut only between words: the words that do not fit are left out whole
    ("38% load 13.53 12.87", never "38% load 13.53 12."); a first word too long is elided."""
    if len(text) <= width:
        return text
    words = text.split(" ")
    while len(words) > 1 and len(" ".join(words)) > width:
        words.pop()
    kept = " ".join(words).rstrip()
    return kept if len(kept) <= width else elide(kept, width)


def _meter(
    label: str, pct: float | None, value: str, history: list[float], width: int, style: str, room: int = _VALUE
) -> Line:
    """One line: label, bar, value (in ``room`` columns, whole words), then a sparkline in the room that is left."""
    line = Line(label.ljust(_LABEL), style="bold")
    line.extend(bar_pieces(pct, _bar_width(width, room), style))
    line.append(" " + whole_words(value, room).ljust(room) + " ")
    return line.append(spark_chars(history, _history_width(width, room)), style)


def fit_parts(parts: list[tuple[str, str]], width: int, gap: str = "  ") -> Line:
    """The parts that fit ``width`` whole, in order, ``gap`` between them; the first part that does not fit ends
    the line (a vitals line at a narrow width loses its last figures, never half of one)."""
    line, used = Line(), 0
    for label, style in parts:
        need = len(label) + (len(gap) if used else 0)
        if used + need > width:
            break
        if used:
            line.append(gap)
        line.append(label, style=style)
        used += need
    return line


class LinePanel(Coalesced, KeptStyle, Widget):
    """Renders a few fixed lines through Textual's line API: no wrapping or
    markup pass, strips cached until the data or the width change. This keeps
    an idle monitor with many GPUs cheap to repaint every second."""

    def __init__(self, id: str, classes: str = "") -> None:
        super().__init__(id=id, classes=classes)
        self._strips: list[Strip] | None = None
        self._drawn: object = None  # (width, inputs()) the strips were drawn from
        self.built = 0  # times the lines were built (tests count them)

    def lines(self, width: int) -> list[Line]:
        raise NotImplementedError

    def inputs(self) -> object:
        """All that ``lines`` draws from (compared, never hashed): the same twice, the lines are the same."""
        raise NotImplementedError

    def _build(self, width: int) -> list[Strip]:
        self.built += 1
        self._drawn = (width, self.inputs())
        console, base = self.app.console, self.rich_style  # kept until a style changes (kept_style.py)
        return [line.strip(width, console, base) for line in self.lines(width)]

    def history_width(self) -> int:
        """How many samples the sparklines show at the current width."""
        return _history_width(self.content_size.width or 76)

    def refresh_lines(self) -> None:
        """Draw the lines anew; repaint only those that changed (none: no repaint). An idle GPU's panel reads the
        same each second (its history of zeros too): repainting it cost the compositor a pass over the panel
        and every widget under it, each second. Values the same as those drawn (an idle GPU, its history of
        zeros): not even the lines are built again."""
        old, width = self._strips, self.content_size.width
        if old is None or not width or (old and old[0].cell_length != width):  # not drawn yet, or to a width gone
            self._strips = None
            self.refresh()
            return
        if self._drawn == (width, self.inputs()):
            return
        self._strips = new = self._build(width)
        if len(new) != len(old):
            self.refresh()
            return
        changed = [Region(0, y, width, 1) for y, (was, now) in enumerate(zip(old, new, strict=True)) if was != now]
        if changed:
            self.refresh(*changed)

    def on_resize(self, event: Resize) -> None:
        self._strips = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._drawn = None  # the widget's style is in every strip: the next sample builds them (a theme change)

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if self._strips is None or (self._strips and self._strips[0].cell_length != width):  # a width change
            # that came without a Resize (a scrollbar appearing in the parent) must not leave lines cut short
            self._strips = self._build(width)
        return self._strips[y] if y < len(self._strips) else Strip.blank(width, self.rich_style)


class GpuPanel(LinePanel):
    """One GPU: utilisation and memory bars with history, then its vitals."""

    class Selected(Message):
        def __init__(self, index: int) -> None:
            self.index = index
            super().__init__()

    def __init__(self, index: int, simulated: bool) -> None:
        super().__init__(id=f"gpu-{index}", classes="gpu-panel")
        self.index = index
        self.device: GpuDevice | None = None
        self.util_history: list[float] = []
        self.mem_history: list[float] = []
        self.warning: tuple[str, str] | None = None  # (leak state, note) of a run on this GPU whose memory warns
        self.compact = False  # one line: index, name, util and memory bars, temperature, power
        self._title = f"GPU {index}"
        self.border_title = self._title
        self.simulated = simulated
        self.hint: str | None = None  # the GPUs the list hides, on the last panel in sight (gpus/gpu_list.py)
        self.border_subtitle = "SIMULATED" if simulated else ""

    def set_hint(self, hint: str | None) -> None:
        if hint != self.hint:
            self.hint = hint
            self.border_subtitle = " · ".join(p for p in (hint, "SIMULATED" if self.simulated else None) if p)

    def show(self, device: GpuDevice, util_history: list[float], mem_history: list[float]) -> None:
        self.device = device
        self.util_history = util_history
        self.mem_history = mem_history
        self._title = f"GPU {device.index} · {device.name or NA}"
        self._set_title()
        if self.has_class("-down") != (device.state != "ok"):
            self.set_class(device.state != "ok", "-down")
        self.refresh_lines()

    def set_compact(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self.refresh_lines()

    def set_warning(self, warning: tuple[str, str] | None) -> None:
        """(state, note) of a run on this GPU whose memory grows or which holds it idle, or None; a change repaints."""
        if warning == self.warning:
            return
        self.warning = warning
        state = warning[0] if warning is not None else None
        self.set_class(state == "growing", "-growing")
        self.set_class(state == "leak", "-leak")
        self._set_title()
        if self.compact:  # the line carries the warning (no border to show it)
            self.refresh_lines()

    def _set_title(self) -> None:
        title = self._title if self.warning is None else f"{self._title} · {self.warning[1]}"
        set_title(self, title)  # the GPU's name and the run's note are not ours

    def inputs(self) -> object:
        return (self.device, self.util_history, self.mem_history, self.compact, self.warning)

    def on_click(self, event: Click) -> None:
        self.post_message(self.Selected(self.index))

    def lines(self, width: int) -> list[Line]:
        d = self.device
        if d is None:
            return [Line("sampling…", style="dim")]
        if d.state != "ok":
            where = f"{d.index:>2} " if self.compact else ""
            return [Line(f"{where}{d.state.upper()}: {d.reason}", style="bold red")]
        if self.compact:
            return [compact_line(d, width, self.warning)]
        mem_value = f"{percent(d.mem_percent):>4} {gib_pair(d.mem_used, d.mem_total)}"
        mem_style = level_style(d.mem_percent, 80, 95)
        util_value = percent(d.gpu_util).rjust(4)
        room = value_width([util_value, mem_value], width)
        lines = [_meter("UTIL", d.gpu_util, util_value, self.util_history, width, "cyan", room)]
        if (gpm := gpm_line(d, width)) is not None:
            lines.append(gpm)
        mem = _meter("MEM", d.mem_percent, mem_value, self.mem_history, width, mem_style, room)
        return [*lines, mem, self._vitals(d, width)]

    def _vitals(self, d: GpuDevice, width: int) -> Line:
        power_pct = None if d.power_draw is None or not d.power_limit else 100 * d.power_draw / d.power_limit
        parts: list[tuple[str, str]] = [
            (num(d.temperature, "°C"), level_style(d.temperature, 80, 90)),
            (f"{num(d.power_draw)}/{num(d.power_limit, ' W')}", level_style(power_pct, 90, 98)),
            (f"{_CLOCK.get(d.vendor, 'SM')} {num(d.sm_clock)} MHz", ""),
            (f"MEM {num(d.mem_clock)} MHz", ""),
            (f"P{d.pstate}" if d.pstate is not None else "P N/A", ""),
            (f"fan {percent(d.fan)}", "dim" if d.fan is None else ""),
        ]
        if d.vendor != "nvidia":  # P-states are NVIDIA's: no "P N/A" on every other card
            del parts[4]
        if d.ecc_errors:
            parts.append((f"ECC {d.ecc_errors}", "bold red"))
        if d.mig_mode:
            parts.append(("MIG", "magenta"))
        procs = (d.processes_reason and "procs N/A") or f"{len(d.processes)} proc{'s' if len(d.processes) != 1 else ''}"
        parts.append((procs, "dim"))
        return fit_parts(parts, width)


_CLOCK = {"amd": "GFX", "intel": "GT"}  # the shader clock's name by vendor (NVIDIA's SM)


def gpm_line(d: GpuDevice, width: int = 200) -> Line | None:
    """ "SM active 42%  occupancy 21%  tensor 30%  DRAM 18%" (NVML GPM, Hopper and later: how much of the GPU
    the kernels use, where UTIL is only the time any kernel ran); None where GPM gives nothing."""
    values: list[tuple[str, float | None]] = [("SM active", d.sm_active), ("occupancy", d.sm_occupancy)]
    values += [("tensor", d.tensor_active), ("DRAM", d.dram_active)]
    if all(v is None for _, v in values):
        return None
    text, used = Line(), 0
    for label, value in values:
        figure = NA if value is None else f"{value * 100:.0f}%"
        need = len(label) + 1 + len(figure) + (2 if used else 0)
        if used + need > width:  # whole figures only
            break
        text.append("  " if used else "")
        text.append(f"{label} ", style="dim")
        text.append(figure, style="dim" if value is None else "cyan")
        used += need
    return text


def compact_line(d: GpuDevice, width: int, warning: tuple[str, str] | None = None) -> Line:
    """A GPU in one line (nvitop's compact mode): index, name, util and memory bars, temperature, power."""
    power_pct = None if d.power_draw is None or not d.power_limit else 100 * d.power_draw / d.power_limit
    mem = gib_pair(d.mem_used, d.mem_total)
    tail = [
        (f" {percent(d.mem_percent):>4} {mem:<15}", level_style(d.mem_percent, 80, 95)),
        (f" {num(d.temperature, '°C'):>5}", level_style(d.temperature, 80, 90)),
        (f" {num(d.power_draw, ' W'):>6}", level_style(power_pct, 90, 98)),
    ]
    if warning is not None:
        tail.append((" ▲", "bold red" if warning[0] == "leak" else "yellow"))
    fixed = 3 + 5 + sum(len(text) for text, _ in tail) + 2  # index, util %, the tail, the gaps
    name_width = max(6, min(len(d.name or NA), width // 4))
    bar_width = max(4, (width - fixed - name_width - 1) // 2)
    line = Line(f"{d.index:>2} ", style="bold")
    line.append(elide(d.name or NA, name_width).ljust(name_width) + " ")
    line.extend(bar_pieces(d.gpu_util, bar_width, "cyan"))
    line.append(f" {percent(d.gpu_util):>4} ")
    line.extend(bar_pieces(d.mem_percent, bar_width, level_style(d.mem_percent, 80, 95)))
    for text, style in tail:
        line.append(text, style=style)
    return line


class HostPanel(LinePanel):
    """Host CPU (total and per core), load, memory and swap."""

    def __init__(self) -> None:
        super().__init__(id="host")
        self.border_title = "host"
        self.host: HostSample | None = None
        self.cpu_history: list[float] = []
        self.mem_history: list[float] = []

    def show(self, host: HostSample, cpu_history: list[float], mem_history: list[float]) -> None:
        self.host = host
        self.cpu_history = cpu_history
        self.mem_history = mem_history
        set_title(self, f"host {host.hostname}")
        self.refresh_lines()

    def inputs(self) -> object:
        h = self.host
        values = None if h is None else (h.hostname, h.cpu_percent, h.per_cpu, h.load, h.mem_used, h.mem_total)
        return (values, None if h is None else (h.swap_used, h.swap_total), self.cpu_history, self.mem_history)

    def lines(self, width: int) -> list[Line]:
        h = self.host
        if h is None:
            return [Line("sampling…", style="dim")]
        load = " ".join(f"{v:.2f}" for v in h.load) if h.load else NA
        cpu_value = f"{h.cpu_percent:>3.0f}% load {load}"  # the 15-minute load goes first where room is short
        mem_value = f"{h.mem_percent:>3.0f}% {gib_pair(h.mem_used, h.mem_total)}"
        room = value_width([cpu_value, mem_value], width)
        # no per-core use (an older gpumon's fleet line): its cores unknown, never "0 cores"
        cores = Line(f"{len(h.per_cpu) or NA} cores ".ljust(_LABEL + 4), style="bold")
        spark = max(0, width - _LABEL - 4 - 28)
        cores.append(spark_chars(list(h.per_cpu)[:spark], min(spark, len(h.per_cpu))), "cyan")
        swap_pct = 100 * h.swap_used / h.swap_total if h.swap_total and h.swap_used is not None else None
        swap = f"  swap {gib_pair(h.swap_used, h.swap_total) if h.swap_total is not None else NA}"
        if len(cores.plain) + len(swap) <= width:  # whole, or not at all
            cores.append(swap, style=level_style(swap_pct, 20, 60))
        return [
            _meter("CPU", h.cpu_percent, cpu_value, self.cpu_history, width, "cyan", room),
            _meter("MEM", h.mem_percent, mem_value, self.mem_history, width, level_style(h.mem_percent, 80, 95), room),
            cores,
        ]
