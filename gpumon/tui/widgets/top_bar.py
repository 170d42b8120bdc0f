"""The top bar's text: version, host, GPU source, driver, GPU count, interval and any source error."""

from __future__ import annotations

from rich.text import Text

from gpumon import __version__
from gpumon.core.model import GpuSample


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
