"""An idle tick's frame (issue 35): the compositor asks only the widgets on the changed lines, for those lines.

Textual drew a partial frame from the box around all changed regions: every widget the box touched (the screen,
the switcher, the view, the GPU list, the footer...) was asked for all its visible lines, each cropped and
filtered, to write the few lines that changed. textual_private/dirty_lines.py asks each widget for its changed
lines only."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from textual._compositor import Compositor
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget

from gpumon.tui.app import GpumonApp
from gpumon.tui.feeds import SampleReady
from gpumon.tui.textual_private.dirty_lines import DirtyLines
from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app, pilot_until


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    return tmp_path


class Frames:
    """The compositor's updates (each frame, headless as in a terminal), counted; and the count when the app last
    handed a sample to its views."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.applied_at = -1
        render_update, apply = Compositor.render_update, GpumonApp.apply

        def counted(compositor: Compositor, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return render_update(compositor, *args, **kwargs)

        def applied(app: GpumonApp, snapshot: Any) -> None:
            self.applied_at = self.count  # the sample's frame may be drawn within apply (repaint.py)
            apply(app, snapshot)

        monkeypatch.setattr(Compositor, "render_update", counted)
        monkeypatch.setattr(GpumonApp, "apply", applied)


def showing(app: GpumonApp, devices: tuple[Any, ...]) -> bool:
    return app.query_one(ProcessTable)._last[0] is devices


async def at_rest(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, GpumonApp)
    table = app.query_one(ProcessTable)
    await pilot_until(pilot, lambda: table.row_count > 0 and table.column_set != ())
    await pilot_until(pilot, lambda: not app.drawing_unseen() and all(w.is_finished for w in app.workers))


async def one_sample(pilot: Pilot[None], frames: Frames) -> None:
    """A new sample (the simulated GPUs' values and the processes' move), shown, then the frame that draws it."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    before = frames.count
    app.sampler.sample_once()  # posted by the sampler (on_sample), then again below: the same sample twice
    latest = app.sampler.latest
    assert latest is not None
    app.post_message(SampleReady(latest))
    await pilot_until(pilot, partial(showing, app, latest.gpu.devices), "the sample was never shown")
    await pilot_until(pilot, lambda: frames.count > before, "no frame after the sample")


def asked_lines(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Lines the compositor asks of each widget class from now on."""
    asked: dict[str, int] = {}
    render_lines = Widget.render_lines

    def counted(widget: Widget, crop: Region) -> Any:
        name = type(widget).__name__
        asked[name] = asked.get(name, 0) + crop.height
        return render_lines(widget, crop)

    monkeypatch.setattr(Widget, "render_lines", counted)
    return asked


async def test_a_sample_asks_only_the_widgets_on_its_changed_lines(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: the widgets (and their lines) a sample's frame asks for. Before, each frame asked the screen, the
    switcher, the view, the GPU list, the top bar's row and the footer for all their lines, and each panel and the
    table for all theirs: ~130 lines a frame to write ~10."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await at_rest(pilot)
        frames = Frames(monkeypatch)
        await one_sample(pilot, frames)  # what came before the count is drawn
        asked = asked_lines(monkeypatch)
        for _ in range(3):
            await one_sample(pilot, frames)
        assert set(asked) <= {GpuPanel.__name__, HostPanel.__name__, ProcessTable.__name__}, asked
        assert GpuPanel.__name__ in asked  # the panels' sparklines move each sample: drawn
        panels = sum(len(p._strips or ()) for p in app.query(GpuPanel)) + len(app.query_one(HostPanel)._strips or ())
        assert sum(asked.values()) <= 3 * (panels + 2), asked  # their changed lines, a process row or two


async def test_each_partial_frame_writes_what_textuals_frame_writes(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each partial frame as the terminal gets it, ours beside Textual's own for the same changed regions: samples,
    the cursor, all GPUs' processes, the compact panels, a sort, a view and back."""
    ours = DirtyLines._changed_lines
    compared: list[int] = []

    def both(compositor: DirtyLines, regions: set[Region]) -> Any:
        update = ours(compositor, regions)
        compositor._dirty_regions.update(regions)
        theirs = Compositor.render_partial_update(compositor)
        assert (update is None) == (theirs is None)
        if update is not None and theirs is not None:
            console = app.console
            assert update.render_segments(console) == theirs.render_segments(console)
            compared.append(len(update.spans))
        return update

    monkeypatch.setattr(DirtyLines, "_changed_lines", both)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await at_rest(pilot)
        frames = Frames(monkeypatch)
        assert isinstance(app.screen._compositor, DirtyLines)
        for keys in ((), ("a",), ("down",), ("c",), ("c",), ("s",), ("r", "g"), ()):
            await pilot.press(*keys)
            await one_sample(pilot, frames)
        assert len(compared) >= 8 and DirtyLines.works


async def test_a_compositor_whose_private_parts_moved_draws_textuals_way(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Textual is pinned for the tests only: where a user's newer compositor no longer fits (a private name gone),
    the frame is drawn Textual's own way from then on, the same lines, never an error."""

    def moved(*args: Any) -> Any:
        raise AttributeError("'Compositor' object has no attribute 'cuts'")

    monkeypatch.setattr(DirtyLines, "_line_chops", moved)
    monkeypatch.setattr(DirtyLines, "works", True)  # restored after the test
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await at_rest(pilot)
        frames = Frames(monkeypatch)
        await one_sample(pilot, frames)
        assert DirtyLines.works is False  # given up at the first partial frame, for good
        await one_sample(pilot, frames)  # and the next frames drawn Textual's way
        screen = "".join(strip.text for strip in app.screen._compositor.render_strips())
        assert app.is_running and "GPU 0" in screen
