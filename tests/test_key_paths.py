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
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input

from gpumon.tui.app import GpumonApp
from gpumon.tui.feeds import SampleReady
from gpumon.tui.views import VIEWS
from gpumon.tui.views.gpus.view import GpusView
from gpumon.tui.widgets.footer import KeysFooter
from gpumon.tui.widgets.gpu_panels import GpuPanel, LinePanel
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import home, record_runs  # noqa: F401 - home: the fixture


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


async def open_and_close_form(pilot: Pilot[None]) -> Screen:
    """`n` then `escape`, twice: what a first opening builds is built; the form, closed."""
    from gpumon.tui.views.runs.launch_form import LaunchForm

    app = pilot.app
    for _ in range(2):
        await pilot.press("n")
        await pilot_until(pilot, lambda: isinstance(app.screen, LaunchForm))
        form = app.screen
        await pilot.press("escape")
        await pilot_until(pilot, lambda form=form: app.screen is not form)
        await pilot.pause(0.2)
    return form


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


def styled(monkeypatch: pytest.MonkeyPatch, count: list[str]) -> None:
    """Each node styled goes into ``count``."""
    from textual.css.stylesheet import Stylesheet

    apply = Stylesheet.apply

    def counted(self: Stylesheet, node: Any, **kwargs: Any) -> None:
        count.append(f"styled {node!r}")
        apply(self, node, **kwargs)

    monkeypatch.setattr(Stylesheet, "apply", counted)


def look(widget: Widget) -> list[tuple[str, dict[str, object]]]:
    """The rules worked out for ``widget`` and each node under it (its parts: a table's cursor, a select's list)."""
    nodes = [widget, *widget.walk_children()]
    parts = [part for node in nodes for part in getattr(node, "_component_styles", {}).values()]
    return [(repr(n), dict(n.styles.base._rules)) for n in nodes] + [("part", dict(p.base._rules)) for p in parts]


def look_restyled(app: GpumonApp, widget: Widget) -> list[tuple[str, dict[str, object]]]:
    """``widget``'s look once styled anew for the state it is in now."""
    app.stylesheet.update_nodes([widget, *widget.walk_children()], animate=False)
    return look(widget)


async def test_a_view_key_restyles_no_widget_whose_focus_changed_out_of_sight(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`g` restyled the Runs table it hid (blurred: 10 nodes with its parts) and `r` restyled it again as it came
    back focused, on each key's path: 14 nodes a key. A widget blurred out of sight keeps its look, and focused
    again it is already styled for the focus: no node is styled before either key's frame, and each widget looks
    as a restyle would draw it."""
    from gpumon.tui.views.gpus.gpu_list import GpuList
    from gpumon.tui.views.runs.run_table import RunTable

    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: app.ahead.laid_out)  # what is built ahead
        for key, view in (("r", "runs"), ("g", "gpus")):  # each focus place seen once
            await pilot.press(key)
            await pilot_until(pilot, lambda view=view: app.view == view)
            await pilot.pause(0.2)
        table, gpus = app.query_one(RunTable), app.query_one(GpuList)
        for key, view, focused in (("r", "runs", table), ("g", "gpus", gpus), ("r", "runs", table)):
            count: list[str] = []
            with to_the_frame(monkeypatch, app, lambda view=view: app.view == view, count) as at_frame:
                styled(monkeypatch, count)
                await pilot.press(key)
                await pilot_until(pilot, lambda: bool(at_frame))
            monkeypatch.undo()
            assert at_frame[0] == [], (key, at_frame)
            await pilot_until(pilot, lambda focused=focused: focused.has_focus)
            assert look(focused) == look_restyled(app, focused)  # the focused look, though not restyled


async def test_a_table_blurred_out_of_sight_and_shown_without_the_focus_takes_the_unfocused_look(
    home: Path,  # noqa: F811
) -> None:
    """The look kept out of sight is the focused one; shown again with the focus elsewhere, it is restyled."""
    from gpumon.tui.views.runs.run_table import RunTable

    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r")
        table = app.query_one(RunTable)
        await pilot_until(pilot, lambda: table.has_focus)
        focused_look = look(table)
        await pilot.press("g")
        await pilot_until(pilot, lambda: app.view == "gpus" and not table.has_focus)
        assert look(table) == focused_look  # kept while hidden
        runs = app.view_widget("runs")
        assert isinstance(runs, Widget)
        other = next(w for w in runs.query("*") if w.focusable and w is not table)
        app._focus_of_view["runs"] = other  # the Runs view comes back with its focus elsewhere
        await pilot.press("r")
        await pilot_until(pilot, lambda: other.has_focus)
        await pilot.pause(0.2)
        assert look(table) != focused_look
        assert look(table) == look_restyled(app, table)


async def test_the_launch_form_opens_and_closes_restyling_none_of_its_fields(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Escape blurred the form's first field as the form closed (11 nodes restyled, the select and its list)
    and `n` restyled them again as it focused it: the field looks focused whenever the form shows."""

    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        footer = app.query_one(KeysFooter)
        await pilot_until(pilot, lambda: len(footer._sets) == len(VIEWS))  # built ahead
        await pilot.press("r")
        await pilot_until(pilot, lambda: app.view == "runs")
        form = await open_and_close_form(pilot)  # the form's footer keys, built at its first opening
        for key, shows in (("n", lambda: app.screen is form), ("escape", lambda: app.screen is not form)):
            count: list[str] = []
            with to_the_frame(monkeypatch, app, shows, count) as at_frame:
                styled(monkeypatch, count)
                await pilot.press(key)
                await pilot_until(pilot, lambda: bool(at_frame))
            monkeypatch.undo()
            assert at_frame[0] == [], (key, at_frame)
        await pilot.press("n")
        kind = form.query_one("#kind")
        await pilot_until(pilot, lambda: app.screen is form and kind.has_focus)
        assert look(kind) == look_restyled(app, kind)


async def test_the_first_n_and_the_first_help_find_their_screens_laid_out_and_drawn(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The form and the help were built ahead but laid out and drawn at their first opening, on its key's path
    (every field, label and button; the help's whole text measured and drawn: 60-100 ms of CPU, the p90 of `n` and
    `?`). They are laid out and drawn unseen after the start: the first opening draws no more than a later one."""
    from textual.widget import Widget as TextualWidget

    from gpumon.tui.views.runs.launch_form import LaunchForm
    from gpumon.tui.widgets.screens import HelpScreen

    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: app.ahead.laid_out)
        await pilot.press("r")
        await pilot_until(pilot, lambda: app.view == "runs")
        await pilot.pause(0.2)
        drawn: dict[str, list[int]] = {}
        for key, screen in (("n", LaunchForm), ("question_mark", HelpScreen)) * 2:
            count: list[str] = []
            counting(monkeypatch, TextualWidget, "_render_content", count, "drew")
            with to_the_frame(monkeypatch, app, lambda screen=screen: isinstance(app.screen, screen), count) as at:
                await pilot.press(key)
                await pilot_until(pilot, lambda: bool(at))
            monkeypatch.undo()
            drawn.setdefault(key, []).append(len(at[0]))
            await pilot.press("escape")
            await pilot_until(pilot, lambda: app.screen is app.screen_stack[0])
            await pilot.pause(0.2)
        for key, (first, later) in drawn.items():
            assert first <= later + 1, (key, drawn)  # (the form's note or error may draw once more)


async def test_the_first_d_draws_the_diagnosis_it_holds(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The doctor read its run only once shown: the first `d`'s frame said "doctor" and nothing else, and the run's
    diagnosis came with a later frame (the p90 of `d`). It is read once shortly after the start."""
    from gpumon.tui.views.doctor.view import DoctorView

    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        doctor = app.view_widget("doctor")
        assert isinstance(doctor, DoctorView)
        await pilot_until(pilot, lambda: len(app.context.runs) == 3 and app.ahead.laid_out and not doctor._busy)
        titles: list[str] = []
        display = App._display

        def frame(self: App[object], screen: Any, renderable: Any) -> None:
            display(self, screen, renderable)
            if renderable is not None and app.view == "doctor" and not titles:
                titles.append(str(doctor.border_title))

        monkeypatch.setattr(App, "_display", frame)
        await pilot.press("d")
        await pilot_until(pilot, lambda: bool(titles))
        newest = max(app.context.runs.values(), key=lambda s: (s.record.created, s.id))
        assert titles == [f"doctor · {newest.id}"]


async def test_each_views_first_key_finds_its_footer_keys_measured(home: Path) -> None:  # noqa: F811
    """The footer's keys built ahead were measured (each key's text rendered) at their set's first showing: ~18 keys
    on the first press of each view key. They are measured ahead."""
    from gpumon.tui.widgets import footer as footer_module

    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: app.ahead.laid_out)
        measured = dict(footer_module._TEXT_WIDTHS.items())
        assert measured
        for key, view in (("r", "runs"), ("t", "trials"), ("d", "doctor"), ("h", "fleet"), ("g", "gpus")):
            await pilot.press(key)
            await pilot_until(pilot, lambda view=view: app.view == view)
            await pilot.pause(0.2)
        assert dict(footer_module._TEXT_WIDTHS.items()) == measured  # none measured on a key's path


async def test_n_fills_the_kept_form_without_a_layout(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Filling the kept form set the processes field to "" then back to its default and set its texts (the note,
    the hint, the error, a label) to what they showed: each asked a layout of the form, on `n`'s path. A field or
    text is now set only to a new value: opened again as it was, the form is shown without a layout."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: app.ahead.laid_out)
        await pilot.press("r")
        await pilot_until(pilot, lambda: app.view == "runs")
        form = await open_and_close_form(pilot)
        laid_out: list[str] = []
        counting(monkeypatch, Screen, "_refresh_layout", laid_out, "laid out")
        with to_the_frame(monkeypatch, app, lambda: app.screen is form, laid_out) as at_frame:
            await pilot.press("n")
            await pilot_until(pilot, lambda: bool(at_frame))
        assert at_frame[0] == []
        assert form.query_one("#nproc", Input).value == "2" and form.values().program == ""


def drawing(monkeypatch: pytest.MonkeyPatch, count: list[str], said: Callable[[Widget], str | None]) -> None:
    """Each widget whose content is rendered goes into ``count`` as ``said`` says it (None: not counted)."""
    content = Widget._render_content

    def rendered(self: Widget) -> None:
        if (what := said(self)) is not None:
            count.append(what)
        content(self)

    monkeypatch.setattr(Widget, "_render_content", rendered)


def drawing_under(monkeypatch: pytest.MonkeyPatch, root: Widget, count: list[str]) -> None:
    """Each widget under ``root`` whose content is rendered goes into ``count``."""
    drawing(monkeypatch, count, lambda w: f"drew {type(w).__name__}#{w.id}" if root in w.ancestors else None)


async def test_the_first_r_draws_nothing_of_the_runs_view_a_later_r_does_not(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Runs view's rows were built hidden but never drawn: the first `r` laid the view out and drew every row
    of its table and every part of the selected run's detail on its path (its p90, 133-191 ms at rest, later
    ones 53). The app draws each hidden view once, unseen, shortly after the start (tui/unseen.py): the first `r`
    draws no table row and no part of the view that a later `r` does not draw, and restyles nothing."""
    from textual.css.stylesheet import Stylesheet
    from textual.widgets import DataTable

    from gpumon.tui.views.runs.run_table import RunTable
    from gpumon.tui.views.runs.view import RunsView

    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        runs = app.view_widget("runs")
        assert isinstance(runs, RunsView)
        await pilot_until(pilot, lambda: len(app.context.runs) == 3 and app.ahead.laid_out and runs._built)
        await pilot.pause()  # a view that read its rows late asked to be drawn again (DrawnLate)
        await pilot_until(pilot, lambda: not app.drawing_unseen())
        assert app.screen.focused is not None and not runs.query_one(RunTable).has_focus  # the focus stayed put
        drawn: list[list[str]] = []
        for key, view in (("r", "runs"), ("g", "gpus"), ("r", "runs")):
            count: list[str] = []
            if view == "runs":
                counting(monkeypatch, DataTable, "_render_line_in_row", count, "row of")
                drawing_under(monkeypatch, runs, count)
                counting(monkeypatch, Stylesheet, "apply", count, "styled")
            with to_the_frame(monkeypatch, app, lambda view=view: app.view == view, count) as at_frame:
                await pilot.press(key)
                await pilot_until(pilot, lambda: bool(at_frame))
            monkeypatch.undo()
            if view == "runs":
                drawn.append(at_frame[0])
            await pilot.pause(0.3)
        first, later = drawn
        assert not [what for what in first if what.startswith(("row of", "styled"))], first
        assert sorted(first) == sorted(later), drawn  # the first press draws what every later one draws


async def test_views_not_drawn_ahead_where_textuals_internals_moved_still_show(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The unseen draw leans on Textual's private compositor (pinned for the tests only): where a user's newer
    Textual no longer fits, the first presses lose their speed, never the app nor a view."""
    from gpumon.tui.textual_private.offscreen import UnseenViews
    from gpumon.tui.views.runs.view import RunsView

    def moved(*args: Any) -> bool:
        raise AttributeError("'Compositor' object has no attribute 'layers'")

    monkeypatch.setattr(UnseenViews, "_draw", moved)
    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: len(app.context.runs) == 3 and not app.drawing_unseen())
        assert isinstance(app.ahead.unseen.failed, AttributeError)
        await pilot.press("r")
        runs = app.view_widget("runs")
        assert isinstance(runs, RunsView)
        await pilot_until(pilot, lambda: runs.display and runs.region.height > 0)
        assert app.is_running
