"""Pieces of the GPU view (the monitor): the GPU list, the top bar's text, the no-GPU notice."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll

from gpumon import __version__
from gpumon.core.model import GpuSample


class GpuList(VerticalScroll):
    """The GPU panels; up/down move the selection while it has focus."""

    BINDINGS = [
        Binding("up,k", "app.gpu(-1)", "prev GPU", show=False, id="gpu_up"),
        Binding("down,j", "app.gpu(1)", "next GPU", show=False, id="gpu_down"),
    ]
    can_focus = True


def top_bar_text(gpu: GpuSample, hostname: str, interval: float, error: str | None = None) -> Text:
    text = Text.assemble(("gpumon ", "bold"), (__version__, "dim"), " · ", (hostname, "bold"), " · ")
    if gpu.simulated:  # the badge stands in for the source's name
        text.append(" SIMULATED ", style="bold black on yellow")
    else:
        text.append(f"{gpu.source}")
    if gpu.driver and not gpu.simulated:
        text.append(f" driver {gpu.driver}", style="dim")
    text.append(f" · {len(gpu.devices)} GPU{'s' if len(gpu.devices) != 1 else ''} · every {interval:g}s")
    if gpu.reason and gpu.devices:
        text.append(f"  {gpu.reason}", style="bold red")
    if error:
        text.append(f"  {error}", style="bold red")
    return text


def no_gpu_text(reason: str | None) -> Text:
    return Text.assemble(
        ("No GPU shown\n", "bold"),
        (f"{reason or 'no GPU source answered'}\n", "yellow"),
        ("The host panel is live. For a demo with simulated GPUs: ", "dim"),
        ("gpumon --simulate 2", "bold"),
    )
