"""The top bar: version, host, GPU source, driver, GPU count, interval and any source error.

A narrow terminal drops what matters least first (version, driver, the name gpumon, the long badge), so the
GPU count and the interval stay on screen at 80 columns beside the tabs and the unread alerts.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget
from textual.widgets import Static

from gpumon import __version__
from gpumon.core.model import GpuSample
from gpumon.tui.textual_private.repaint import Coalesced

# What each step leaves out, from the whole bar to the barest one.
_LEVELS: tuple[set[str], ...] = (
    set(),
    {"version"},
    {"version", "driver"},
    {"version", "driver", "name"},
    {"version", "driver", "name", "badge"},
    {"version", "driver", "name", "badge", "every"},
)


def _bar(gpu: GpuSample, hostname: str, interval: float, drop: set[str]) -> Text:
    text = Text()
    if "name" not in drop:
        if "version" not in drop:
            text.append("gpumon ", style="bold")
            text.append(__version__, style="dim")
        else:
            text.append("gpumon", style="bold")
        text.append(" · ")
    text.append(hostname, style="bold")
    text.append(" · ")
    if gpu.simulated:  # the badge stands in for the source's name
        text.append("SIM" if "badge" in drop else " SIMULATED ", style="bold black on yellow")
    else:
        text.append(f"{gpu.source}")
    if gpu.driver and not gpu.simulated and "driver" not in drop:
        text.append(f" driver {gpu.driver}", style="dim")
    count = len(gpu.devices)
    text.append(f" · {count} GPU{'s' if count != 1 else ''} · {'' if 'every' in drop else 'every '}{interval:g}s")
    return text


def _tail(gpu: GpuSample, error: str | None) -> Text:
    text = Text()
    if gpu.reason and gpu.devices:
        text.append(f"  {gpu.reason}", style="bold red")
    if error:
        text.append(f"  {error}", style="bold red")
    return text


def top_bar_text(
    gpu: GpuSample, hostname: str, interval: float, error: str | None = None, width: int | None = None
) -> Text:
    """The bar that fits ``width`` cells (None: the whole bar); where even the barest does not, the host name
    is shortened (with "…") before the GPU count and the interval are. A reason or an error (red) follows:
    what does not fit of it is cut by the widget's ellipsis."""
    tail = _tail(gpu, error)
    bar = _bar(gpu, hostname, interval, set())
    if width is not None:
        for drop in _LEVELS:
            bar = _bar(gpu, hostname, interval, drop)
            if bar.cell_len + tail.cell_len <= width:
                break
        extra = bar.cell_len - width
        if extra > 0:
            short = hostname[: max(1, len(hostname) - extra - 1)] + "…"
            bar = _bar(gpu, short, interval, set(_LEVELS[-1]))
    return bar + tail


class TopInfo(Coalesced, Widget):
    """The bar's text for the width it has now: redrawn on a resize, and only when a sample changed it."""

    DEFAULT_CSS = "TopInfo { height: 1; }"

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._parts: tuple[GpuSample, str, float, str | None] | None = None
        self._key: object = None

    def show(self, gpu: GpuSample, hostname: str, interval: float, error: str | None) -> None:
        key = (gpu.simulated, gpu.source, gpu.driver, len(gpu.devices), gpu.reason, hostname, interval, error)
        self._parts = (gpu, hostname, interval, error)
        if key != self._key:  # an unchanged bar must not cost a redraw each tick
            self._key = key
            self.refresh()

    def render(self) -> Text:
        if self._parts is None:
            return Text("gpumon  sampling…")
        return top_bar_text(*self._parts, width=self.content_size.width)


class TopAlerts(Static):
    """The unread alerts' count: ' ! 2 unread alerts '; ' ! 2 new ' below 100 columns, where the GPU count needs the
    room."""

    def __init__(self) -> None:
        super().__init__(Text(""), id="top-alerts")
        self.unread = -1  # not told yet

    def count(self, unread: int) -> None:
        if unread != self.unread:
            self.unread = unread
            self.fit()

    def fit(self) -> None:
        """Worded for the app's width (as it is now: call again after a resize)."""
        unread = self.unread
        if unread <= 0:
            words = ""
        elif self.app.size.width < 100:
            words = f" ! {unread} new "
        else:
            words = f" ! {unread} unread alert{'s' if unread != 1 else ''} "
        self.update(Text(words, style="bold red"))
