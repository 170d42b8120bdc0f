"""The GPU and host panels' lines, drawn straight from their pieces (tui/widgets/line.py) at each sample.

Through rich's Text each line of each panel was built, cut, rendered to segments and styled anew every second:
most of the panels' share of an idle tick. The same strips now come from the pieces, with no Text, for a line that
fits its room; one wider than its room still goes through Text (its ellipsis)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.pilot import Pilot

from gpumon.core.gpu.simulated import SimulatedSource
from gpumon.tui.app import GpumonApp
from gpumon.tui.feeds import SampleReady
from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel, compact_line, gpm_line
from gpumon.tui.widgets.line import Line, text_strip
from tests.conftest import make_app, pilot_until
from tests.test_key_paths import counting


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    return tmp_path


def devices(count: int = 40) -> list[Any]:
    """Simulated GPUs at many ticks, some with GPM values, some down, one with no name or power limit."""
    source, found = SimulatedSource(4, seed=3), []
    for tick in range(count):
        source.tick = tick * 7
        for d in source.sample().devices:
            if tick % 5 == 1:
                d = replace(d, sm_active=0.42, sm_occupancy=None, tensor_active=0.3, dram_active=0.18)
            if tick % 7 == 2:
                d = replace(d, name=None, power_limit=None, ecc_errors=3, mig_mode=True, gpu_util=None)
            found.append(d)
    return found


@pytest.mark.parametrize("width", [20, 40, 76, 96, 150])
def test_a_panel_line_draws_what_rich_text_draws(width: int) -> None:
    console, rng = Console(width=200, color_system="truecolor"), random.Random(width)
    base = Style(color="#e0e0e0", bgcolor="#1e1e1e")
    panel = GpuPanel(0, simulated=True)
    lines: list[Line] = [Line("sampling…", style="dim"), Line("no style at all"), Line()]
    for d in devices():
        history = [rng.choice([0.0, rng.uniform(0, 100), 100.0, 130.0]) for _ in range(rng.randint(0, 60))]
        panel.device, panel.util_history, panel.mem_history = d, history, history[::-1]
        panel.compact = rng.random() < 0.3
        panel.warning = rng.choice([None, ("leak", "▲ run ddp-c132: memory leak +1 MiB/it")])
        lines += panel.lines(width)
        lines.append(compact_line(d, width, panel.warning))
        if (gpm := gpm_line(d)) is not None:
            lines.append(gpm)
    assert len(lines) > 200
    for line in lines:
        assert line.strip(width, console, base) == text_strip(line.text(), width, console, base), line.plain


async def test_a_sample_draws_the_panels_with_no_rich_text(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: the Text renders one sample costs the GPU panels (a line each, 6 here, before)."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        panels = [app.query_one("#gpu-0", GpuPanel), app.query_one("#gpu-1", GpuPanel), app.query_one(HostPanel)]
        await pilot_until(pilot, lambda: all(p._strips for p in panels))
        rendered: list[str] = []
        render = Text.render

        def counted(self: Text, *args: Any, **kwargs: Any) -> Any:
            rendered.append(self.plain)
            return render(self, *args, **kwargs)

        drawn = [p._strips for p in panels]
        monkeypatch.setattr(Text, "render", counted)
        app.sampler.sample_once()  # every value moves (simulated), each sparkline a column
        app.post_message(SampleReady(app.sampler.latest))
        gpus = list(zip(panels[:2], drawn[:2], strict=True))  # (the host is frozen here: the same values, not drawn)
        await pilot_until(pilot, lambda: all(p._strips is not d for p, d in gpus))
        assert isinstance(app, GpumonApp)
        texts = {strip.text for p in panels[:2] for strip in p._strips or []}
        assert len(texts) >= 6  # UTIL, MEM and vitals of each GPU
        assert [text for text in rendered if text in texts] == []


async def settle(pilot: Pilot[None]) -> None:
    """The start's drawing done (the views drawn ahead too, and whatever was queued), before counting: a fixed
    0.3 s beside CPU hogs may end with a first build still to come."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    await pilot_until(pilot, lambda: not app.drawing_unseen(), "the start's drawing never ended")
    await pilot.pause()


def count_applied(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The samples the app has handed to its views, counted."""
    applied: list[str] = []
    counting(monkeypatch, GpumonApp, "apply", applied, "applied")
    return applied


async def handled(pilot: Pilot[None], applied: list[str], before: int) -> None:
    """A sample handed to the views since ``before``, then the frame after it (idle: the refreshes it asked for
    drawn)."""
    await pilot_until(pilot, lambda: len(applied) > before, "the sample was never handled")
    await pilot.pause()


async def test_a_sample_with_the_values_drawn_builds_no_line(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle GPU reads the same each second, its history of zeros too: its lines were built again each second
    only to find them the same. Counted: the panels' builds of their lines per sample."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        panels = [app.query_one("#gpu-0", GpuPanel), app.query_one("#gpu-1", GpuPanel), app.query_one(HostPanel)]
        await pilot_until(pilot, lambda: all(p._strips for p in panels))
        await settle(pilot)
        built: list[str | None] = []
        for cls in (GpuPanel, HostPanel):
            lines = cls.lines

            def counted(self: Any, width: int, lines: Any = lines) -> Any:
                built.append(self.id)
                return lines(self, width)

            monkeypatch.setattr(cls, "lines", counted)
        applied = count_applied(monkeypatch)
        snap = app.context.snapshot
        assert snap is not None
        before = len(applied)
        app.post_message(SampleReady(snap))  # the same values, the same history
        await handled(pilot, applied, before)  # no build is the point: wait for the sample handled and the frame after
        assert built == []
        gpu1 = replace(snap.gpu.devices[1], temperature=(snap.gpu.devices[1].temperature or 0) + 1)
        before = len(applied)
        app.post_message(SampleReady(replace(snap, gpu=replace(snap.gpu, devices=(snap.gpu.devices[0], gpu1)))))
        await pilot_until(pilot, lambda: bool(built))
        await handled(pilot, applied, before)  # and no build of the other panels after it
        assert built == ["gpu-1"]  # the GPU whose temperature moved, alone
        assert f"{gpu1.temperature}°C" in "".join(str(s.text) for s in panels[1]._strips or [])


async def test_the_panels_style_is_computed_again_only_when_a_style_changed(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sample walked every ancestor's colours once per panel (DOMNode.rich_style, ~0.1 ms each) for the style
    under its lines, and the process table for each line it drew again, though no style had changed. Counted:
    those walks over samples; then a theme changes them."""
    from textual.dom import DOMNode

    from gpumon.tui.widgets.process_table import ProcessTable

    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        panels = [app.query_one("#gpu-0", GpuPanel), app.query_one("#gpu-1", GpuPanel)]
        await pilot_until(pilot, lambda: all(p._strips for p in panels))
        await settle(pilot)
        walks: list[str | None] = []
        rich_style = DOMNode.rich_style

        def counted(self: DOMNode) -> Style:
            if isinstance(self, (GpuPanel, ProcessTable)):
                walks.append(self.id)
            return rich_style.fget(self)  # type: ignore[attr-defined]

        monkeypatch.setattr(DOMNode, "rich_style", property(counted))
        table = app.query_one(ProcessTable)
        lines = table.render_line
        drawn_rows: list[int] = []

        def counted_line(y: int) -> Any:
            drawn_rows.append(y)
            return lines(y)

        monkeypatch.setattr(table, "render_line", counted_line)
        for _ in range(3):
            drawn, rows = [p._strips for p in panels], len(drawn_rows)
            app.sampler.sample_once()  # every GPU value moves, and the process's SM% and memory
            app.post_message(SampleReady(app.sampler.latest))
            await pilot_until(
                pilot, lambda drawn=drawn: all(p._strips is not d for p, d in zip(panels, drawn, strict=True))
            )
            # the frame: the table draws the process's row again
            await pilot_until(pilot, lambda rows=rows: len(drawn_rows) > rows, "the process table never drew")
        assert len(drawn_rows) >= 3
        assert walks == []
        dark = panels[0].rich_style
        told: list[bool] = []  # the panel told its style changed (not read here: reading rich_style is a walk)
        notify = panels[0].notify_style_update
        monkeypatch.setattr(panels[0], "notify_style_update", lambda: (told.append(True), notify())[1])
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await pilot_until(pilot, lambda: told, "the theme never reached the panel")
        await pilot.pause()
        before = panels[0]._strips
        app.sampler.sample_once()
        app.post_message(SampleReady(app.sampler.latest))
        await pilot_until(pilot, lambda: panels[0]._strips is not before)
        assert walks  # the theme changed the styles: walked again
        light = panels[0].rich_style
        assert light != dark and light == rich_style.fget(panels[0])  # type: ignore[attr-defined]
        drawn_now = panels[0]._strips
        assert drawn_now is not None
        assert next(iter(drawn_now[0])).style == light + Style(bold=True)  # "UTIL ", on the new theme's colours
