"""A sample's repaints reach the screen at once (issue 35, tui/textual_private/repaint.py).

Each widget a sample changed woke its own message pump (a Prompt), whose idle posted an Update to the screen, which
woke the screen (another Prompt): 11 messages a tick for the idle monitor, each a task switch on its main thread.
Now the changed widgets go straight on the screen's dirty set and the screen draws them while the sample is handled."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from textual import messages
from textual.message_pump import MessagePump
from textual.pilot import Pilot
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget

from gpumon.core.format import num
from gpumon.core.model import Snapshot
from gpumon.tui.app import GpumonApp
from gpumon.tui.feeds import SampleReady
from gpumon.tui.widgets import process_table
from gpumon.tui.widgets.gpu_panels import GpuPanel
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app, pilot_until
from tests.test_dirty_lines import Frames, asked_lines, at_rest, home, one_sample, showing

__all__ = ["home"]  # the fixture


async def test_a_sample_wakes_no_widget_yet_its_changes_are_drawn(home: Path, monkeypatch: Any) -> None:
    """Three samples that move the panels and the processes: their lines are drawn, and no widget nor the screen
    was sent a Prompt or an Update for it (Textual's way: two per changed widget)."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        frames, _ = await drawn(pilot, monkeypatch)
        wakes: list[str] = []
        dispatch = MessagePump._dispatch_message

        async def counted(pump: MessagePump, message: Any) -> Any:
            if isinstance(message, messages.Prompt | messages.Update) and isinstance(pump, Widget | Screen):
                wakes.append(f"{type(message).__name__}>{type(pump).__name__}")
            return await dispatch(pump, message)

        monkeypatch.setattr(MessagePump, "_dispatch_message", counted)
        asked = asked_lines(monkeypatch)
        for _ in range(3):
            await one_sample(pilot, frames)
        assert asked.get(GpuPanel.__name__, 0) > 0 and asked.get(ProcessTable.__name__, 0) > 0, asked
        assert wakes == [], wakes


async def drawn(pilot: Pilot[None], monkeypatch: Any) -> tuple[Frames, Snapshot]:
    """At rest, a sample drawn with the frames counted from then on; that sample."""
    await at_rest(pilot)
    frames = Frames(monkeypatch)
    await one_sample(pilot, frames)
    latest = pilot.app.sampler.latest  # type: ignore[attr-defined]
    assert latest is not None
    return frames, latest


async def test_a_sample_that_changes_nothing_asks_for_no_line(home: Path, monkeypatch: Any) -> None:
    """The same sample handed again (a GPU at rest reads the same): no widget is repainted, no line asked for."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        frames, latest = await drawn(pilot, monkeypatch)
        asked = asked_lines(monkeypatch)
        applied = frames.applied_at
        frames.applied_at = -1
        app.post_message(SampleReady(latest))
        await pilot_until(pilot, lambda: frames.applied_at >= applied, "the sample was never handed to the views")
        await pilot.pause()  # a frame due now is drawn (the pilot draws one itself)
        assert asked == {}, asked
        assert not app.screen._dirty_widgets


async def test_one_process_that_changed_redraws_its_row_alone(home: Path, monkeypatch: Any) -> None:
    """The same sample but one process's SM%: its cells alone are built, its line alone is asked for; the other
    processes' rows (an idle GPU's read the same each second) are not even built."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        frames, latest = await drawn(pilot, monkeypatch)
        table = app.query_one(ProcessTable)
        gpu = next(d for d in latest.gpu.devices if d.index == table.gpu_index)
        assert len(gpu.processes) >= 2  # a row that changes beside one that does not
        moved = replace(gpu.processes[0], sm_util=(gpu.processes[0].sm_util or 0) + 7)
        device = replace(gpu, processes=(moved, *gpu.processes[1:]))
        devices = tuple(device if d is gpu else d for d in latest.gpu.devices)
        snapshot = replace(latest, gpu=replace(latest.gpu, devices=devices))
        built: list[int] = []
        cells = process_table._cells
        monkeypatch.setattr(process_table, "_cells", lambda p, *a, **k: (built.append(p.pid), cells(p, *a, **k))[1])
        asked = asked_lines(monkeypatch)
        app.post_message(SampleReady(snapshot))
        await pilot_until(pilot, partial(showing, app, devices), "the sample was never shown")
        await pilot_until(pilot, lambda: frames.count > frames.applied_at, "no frame after the sample")
        assert built == [moved.pid]
        assert asked == {ProcessTable.__name__: 1}, asked
        assert table.get_cell(f"{moved.gpu_index}:{moved.pid}", "sm").text.plain == num(moved.sm_util)


async def test_a_samples_frame_is_drawn_as_it_is_handled(home: Path, monkeypatch: Any) -> None:
    """A sample that moves the panels and the processes is drawn while it is handled: one frame, and the screen's
    frame timer not started (its resume, sleep and tick were three more wake-ups of the event loop a sample)."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        frames, _ = await drawn(pilot, monkeypatch)
        resume, apply = Timer.resume, GpumonApp.apply
        resumed: list[str] = []
        during: list[tuple[int, list[str]]] = []  # (frames drawn, timers resumed) within each apply

        def counted_resume(timer: Timer) -> None:
            resumed.append(timer.name)
            resume(timer)

        def counted_apply(app: GpumonApp, snapshot: Any) -> None:
            count = frames.count
            resumed.clear()
            apply(app, snapshot)
            during.append((frames.count - count, list(resumed)))

        monkeypatch.setattr(Timer, "resume", counted_resume)
        monkeypatch.setattr(GpumonApp, "apply", counted_apply)
        for _ in range(3):
            await one_sample(pilot, frames)
        first = [d for d in during if d[0]]  # each sample twice (one_sample): the repeat changes nothing
        assert len(first) >= 3 and all(d == (1, []) for d in first), during
