"""What a key's own frame waits on: the work between a key and the frame that shows its screen, counted.

htop answers a key with the frame it holds and refreshes it on its next tick. A key here waited on drawing
the sample that came while the GPUs view was hidden, on measuring the footer's keys again, and on restyling
widgets whose focus changed while nobody could see them. Each test counts that work up to the key's frame
(the first frame whose screen is the key's), never time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.app import App

from gpumon.tui.app import GpumonApp
from gpumon.tui.feeds import SampleReady
from gpumon.tui.views.gpus.view import GpusView
from gpumon.tui.widgets.gpu_panels import GpuPanel, LinePanel
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import home  # noqa: F401 - the fixture


@contextmanager
def to_the_frame(
    monkeypatch: pytest.MonkeyPatch, app: GpumonApp, shows: Callable[[], bool], count: list[str]
) -> Iterator[list[list[str]]]:
    """Yields, once the first frame for which ``shows()`` holds is drawn, what ``count`` held at that frame."""
    at_frame: list[list[str]] = []
    display = App._display

    def frame(self: App[object], screen: Any, renderable: Any) -> None:
        display(self, screen, renderable)
        if renderable is not None and not at_frame and shows():
            at_frame.append(list(count))

    monkeypatch.setattr(App, "_display", frame)
    yield at_frame


def counting(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, count: list[str], what: str) -> None:
    original = getattr(owner, name)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        count.append(f"{what} {type(self).__name__}")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


async def test_g_shows_the_panels_it_holds_first_and_the_sample_that_came_while_hidden_next(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPUs view drew the sample that came while it was hidden before `g`'s frame: every panel line and
    process row anew on the key's path (10-25 ms of its 60). Now that frame shows what the view holds (a second
    old at most) and the sample follows in the next one."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        gpus = app.view_widget("gpus")
        assert isinstance(gpus, GpusView)
        await pilot.press("r")
        await pilot_until(pilot, lambda: app.view == "runs")
        snapshot = app.sampler.sample_once()
        app.post_message(SampleReady(snapshot))  # a sample while the Runs view shows
        await pilot_until(pilot, lambda: gpus._pending is snapshot)
        await pilot.pause(0.3)
        drawn: list[str] = []
        counting(monkeypatch, LinePanel, "lines", drawn, "lines of")
        counting(monkeypatch, ProcessTable, "show", drawn, "rows of")
        with to_the_frame(monkeypatch, app, lambda: app.view == "gpus", drawn) as at_frame:
            await pilot.press("g")
            await pilot_until(pilot, lambda: bool(at_frame))
        assert at_frame[0] == [], at_frame  # no panel line, no process row drawn before the key's frame
        panel = app.query_one("#gpu-0", GpuPanel)
        await pilot_until(pilot, lambda: gpus._pending is None and panel.device is snapshot.gpu.devices[0])
        assert "rows of ProcessTable" in drawn  # the processes of that sample too, after the frame
