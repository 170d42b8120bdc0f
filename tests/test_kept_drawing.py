"""What a key does not redo: a table shown again keeps the cells it drew, the help and the footer are built once.

A view switch used to redraw every cell of the view's tables (DataTable drops them at each focus move and
each resize, and a view hidden and shown again is resized from 0 by 0), recompose the footer up to three
times, and the help was composed anew at each `?`.
"""

from __future__ import annotations

import gc
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.containers import VerticalScroll
from textual.geometry import Region, Size
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable

from gpumon.core.format import num
from gpumon.tui.feeds import SampleReady
from gpumon.tui.textual_private.footer import FooterKey
from gpumon.tui.views import VIEWS
from gpumon.tui.widgets.footer import KeysFooter, _width
from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel, LinePanel
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import HelpScreen
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import home, open_runs, record_runs  # noqa: F401 - home: the fixture

DRAWN_S = 0.5  # a frame and the Runs view's read after it


def drawn(table: DataTable[object]) -> set[Any]:
    return set(table._cell_render_cache.keys())


def draws(table: DataTable[object]) -> dict[Any, int]:
    """Each drawn cell's cache key and its drawing (a cell drawn again under the same key is a new object)."""
    cache = table._cell_render_cache
    return {key: id(cache.get(key)) for key in cache.keys()}  # noqa: SIM118 - an LRUCache is not iterable


def drawn_since(table: DataTable[object], before: dict[Any, int]) -> set[tuple[str, str]]:
    """(row, column) of the cells drawn since ``before``."""
    return {(str(k[0].value), str(k[1].value)) for k, v in draws(table).items() if before.get(k) != v}


async def drawn_ahead(pilot: Any) -> None:
    """What the app draws ahead, unseen, shortly after its start (the hidden views: tui/unseen.py) is drawn: a count
    that begins before would count it."""
    app = pilot.app
    await pilot_until(pilot, lambda: not app.drawing_unseen() and all(w.is_finished for w in app.workers))


async def test_a_table_shown_again_keeps_the_cells_it_drew(home: Path) -> None:  # noqa: F811
    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_runs(pilot, 3)
        for _ in range(2):  # the first round learns each focus state's look
            await pilot.press("g")
            await pilot.pause(DRAWN_S)
            await pilot.press("r")
            await pilot.pause(DRAWN_S)
        cells = drawn(table)
        assert cells
        await pilot.press("g")
        await pilot.pause(DRAWN_S)
        await pilot.press("r")
        await pilot.pause(DRAWN_S)
        assert drawn(table) == cells  # none dropped, none drawn anew


async def test_a_theme_changed_while_a_table_was_hidden_redraws_its_cells(home: Path) -> None:  # noqa: F811
    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_runs(pilot, 3)
        await pilot.pause(DRAWN_S)
        cells = drawn(table)
        await pilot.press("g")
        app.theme = "textual-light"
        await pilot.pause(DRAWN_S)
        await pilot.press("r")
        await pilot_until(pilot, lambda: bool(drawn(table)))
        assert not drawn(table) & cells  # drawn in the new colours, none kept from before


async def test_the_help_is_built_once_and_opens_at_its_top(home: Path) -> None:  # noqa: F811
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        # a key held behind the ones before it is handled after press returns under load (typeahead.py)
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen), "? never opened the help", 30)
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        await pilot.press("end")
        body = help_screen.query_one("#help-body", VerticalScroll)
        await pilot_until(pilot, lambda: body.scroll_y > 0)
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        await pilot.press("question_mark")
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen), "? never opened the help again", 30)
        assert app.screen is help_screen
        await pilot_until(pilot, lambda: body.scroll_y == 0 and help_screen.focused is body)


async def test_the_footer_builds_each_set_of_keys_once(home: Path) -> None:  # noqa: F811
    app = make_app(gpus=2)
    async with app.run_test(size=(160, 40)) as pilot:
        footer = app.query_one(KeysFooter)
        await pilot_until(pilot, lambda: len(footer._sets) == len(VIEWS))  # each view's, built ahead
        await pilot.pause(DRAWN_S)
        gpus_keys = [key for key in footer.query(FooterKey) if key.parent.display and key.display]
        built = len(footer.query(FooterKey))
        for view in ("r", "g", "r", "g"):
            await pilot.press(view)
            await pilot.pause(DRAWN_S)
        shown = [key for key in footer.query(FooterKey) if key.parent.display and key.display]
        assert shown == gpus_keys  # the GPUs view's keys: the very widgets built first
        assert len(footer.query(FooterKey)) == built  # none built per switch


async def test_a_sample_draws_again_only_the_process_cells_it_changed(home: Path) -> None:  # noqa: F811
    """A tick that changes a process's SM% drew every cell of the table anew, its header too, and repainted it
    whole: the idle monitor's biggest cost. Now only the cells whose text changed are drawn."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count > 0 and bool(drawn(table)))
        await drawn_ahead(pilot)
        await pilot.pause(DRAWN_S)
        row = str(table.ordered_rows[0].key.value)
        for _ in range(10):  # until a sample changes the shown process's SM% (the simulation jitters it)
            before, old = draws(table), table.get_cell(row, "sm").text.plain
            snap = app.sampler.sample_once()
            sm = next(num(p.sm_util) for d in snap.gpu.devices for p in d.processes if f"{d.index}:{p.pid}" == row)
            app.post_message(SampleReady(snap))
            await pilot_until(pilot, lambda sm=sm: table.get_cell(row, "sm").text.plain == sm)
            if sm != old:
                await pilot_until(pilot, lambda b=before: (row, "sm") in drawn_since(table, b))  # drawn on screen
                break
        new_cells = drawn_since(table, before)
        assert (row, "sm") in new_cells
        rows = {str(r.key.value) for r in table.ordered_rows}
        assert {r for r, _ in new_cells} <= rows, new_cells  # never the header
        assert {c for _, c in new_cells} <= {"sm", "mem"}, new_cells  # never the PID, the user or the command
        line = table.render_line(1).text  # the row under the header shows the new value
        assert table.get_cell(row, "sm").text.plain in line and row.split(":")[1] in line


async def test_what_the_app_built_is_kept_out_of_the_collectors_walk_and_given_back_at_its_end(
    home: Path,  # noqa: F811
) -> None:
    """A full collection walked every object of the built views (100-400 ms, the slowest keys): once drawn, they
    are frozen out of its way (heap.py); each view's first showing freezes what it built; the app's end thaws
    them (else a process running many apps, as the tests do, would keep each app's cycles)."""
    gc.unfreeze()
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: gc.get_freeze_count() > 0)
        frozen = gc.get_freeze_count()
        assert frozen > len(gc.get_objects())  # a full collection walks what was made since, not the app
        await pilot.press("r")
        await pilot_until(pilot, lambda: gc.get_freeze_count() > frozen)  # the Runs view's rows, kept too
    assert gc.get_freeze_count() == 0


async def test_fitting_the_footer_measures_each_key_once(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fitting the keys to the width measured each key by rendering it, at each view switch (~5 ms): a key's text
    is fixed when it is built, so it is measured once (again only if its padding changes with compact)."""
    app = make_app(gpus=2)
    async with app.run_test(size=(160, 40)) as pilot:
        footer = app.query_one(KeysFooter)
        await pilot_until(pilot, lambda: footer._shown is not None and footer._sets[footer._shown].display)
        await drawn_ahead(pilot)  # the keys built ahead measured (beside hogs, that came into the count below)
        await pilot.pause()  # laid out
        keys = [k for k in footer.query(FooterKey) if k.display and k.parent.display]
        widths = [_width(k) for k in keys]
        measured: list[FooterKey] = []
        measure = FooterKey.get_content_width

        def counted(self: FooterKey, container: Size, viewport: Size) -> int:
            measured.append(self)
            return measure(self, container, viewport)

        monkeypatch.setattr(FooterKey, "get_content_width", counted)
        assert [_width(k) for k in keys] == widths
        assert measured == []
        keys[0].add_class("-compact")  # its padding changes: measured anew
        await pilot.pause()
        _width(keys[0])
        assert measured == [keys[0]]


async def test_a_view_switch_lays_the_screen_out_once_with_the_views_keys(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A view key laid the whole screen out twice: once for the view, then, after that frame, for the footer's
    keys (Textual tells the footer of the new focus after a refresh, and each key's own layout request came
    later still). The footer now shows the view's keys in the view's own layout, and asks for it once."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        footer = app.query_one(KeysFooter)
        for view in ("r", "g", "r"):  # each set of keys built once
            await pilot.press(view)
            await pilot.pause(DRAWN_S)
        await drawn_ahead(pilot)
        await pilot.pause(DRAWN_S)
        layouts: list[bool] = []  # per layout of the screen: do the GPUs view's keys show in it
        lay_out = Screen._refresh_layout

        def counted(self: Screen[object], *args: Any, **kwargs: Any) -> None:
            layouts.append(any(k.display and k.action == "sort" for k in footer.query(FooterKey)))
            lay_out(self, *args, **kwargs)

        monkeypatch.setattr(Screen, "_refresh_layout", counted)
        await pilot.press("g")
        await pilot_until(pilot, lambda: bool(layouts))
        await pilot.pause(DRAWN_S)
        assert layouts == [True]


async def test_a_gpu_panel_repaints_only_the_lines_a_sample_changed(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each sample repainted every GPU panel and the host panel whole, borders too, though an idle GPU reads the
    same each second: now a panel whose lines read the same is not repainted, and a changed line alone is."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        panels = [app.query_one("#gpu-0", GpuPanel), app.query_one("#gpu-1", GpuPanel), app.query_one(HostPanel)]
        await pilot_until(pilot, lambda: all(p._strips for p in panels))
        await drawn_ahead(pilot)
        await pilot.pause(DRAWN_S)
        snap = app.context.snapshot
        assert snap is not None
        repaints: list[tuple[str | None, tuple[Region, ...]]] = []
        refresh = Widget.refresh

        def counted(self: Widget, *regions: Region, **kwargs: Any) -> Widget:
            if isinstance(self, LinePanel):
                repaints.append((self.id, regions))
            return refresh(self, *regions, **kwargs)

        monkeypatch.setattr(Widget, "refresh", counted)
        app.post_message(SampleReady(snap))  # the same numbers
        await pilot.pause(DRAWN_S)
        assert repaints == []
        gpu0 = snap.gpu.devices[0]
        busier = replace(gpu0, gpu_util=(gpu0.gpu_util or 0) % 90 + 5)  # its UTIL bar and value change
        app.post_message(SampleReady(replace(snap, gpu=replace(snap.gpu, devices=(busier, *snap.gpu.devices[1:])))))
        await pilot_until(pilot, lambda: bool(repaints))
        await pilot.pause(DRAWN_S)
        width = panels[0].content_size.width
        assert repaints == [("gpu-0", (Region(0, 0, width, 1),))]  # the UTIL line of GPU 0 alone
        assert f"{busier.gpu_util:.0f}%" in panels[0].render_line(0).text
