"""Every private part of Textual that gpumon relies on, named once, with the shape gpumon uses, checked on the
installed Textual: an upgrade that moves one fails here, by name (issue 50 item 14). Where one is missing at run
time, gpumon/tui/textual_private/ falls back to Textual's public behaviour, slower, never failing: checked below
with Textual's private modules taken away."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from rich.style import Style
from textual.app import App, ComposeResult
from textual.binding import BindingsMap
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Select

from gpumon.tui.textual_private import nodes
from tests.conftest import pilot_until
from tests.textual_names import all_reaches

#: private modules imported, and the names taken from each
MODULES = {
    "textual._compositor": ("Compositor", "ChopsUpdate"),
    "textual._parser": ("ParseError",),
    "textual._time": ("get_time",),
    "textual._xterm_parser": ("XTermParser",),
    "textual.widgets._footer": ("FooterKey",),
}

#: private methods called or overridden: (class, name) -> the parameters after self, as gpumon passes them
METHODS: dict[tuple[str, str], tuple[str, ...]] = {
    ("DataTable", "_render_line_in_row"): ("row_key", "line_no", "base_style", "cursor_location", "hover_location"),
    ("DataTable", "_render_cell"): ("row_index", "column_index", "base_style", "width", "cursor", "hover"),
    ("DataTable", "_get_row_style"): ("row_index", "base_style"),
    ("DataTable", "_get_styles_to_render_cell"): (
        *("is_header_cell", "is_row_label_cell", "is_fixed_style_cell", "hover", "cursor"),
        *("show_cursor", "show_hover_cursor", "has_css_foreground_priority", "has_css_background_priority"),
    ),
    ("DataTable", "_on_resize"): ("_",),
    ("DataTable", "_get_component_classes"): (),  # a classmethod
    ("Select", "_watch_value"): ("value",),
    ("Widget", "_size_updated"): ("size", "virtual_size", "container_size", "layout"),
    ("Widget", "_clear_arrangement_cache"): (),
    ("Screen", "_refresh_layout"): ("size", "scroll"),
    ("Screen", "_compositor_refresh"): (),
    ("App", "_get_screen"): ("screen",),
    ("Compositor", "_regions_to_spans"): ("regions",),
    ("Compositor", "reflow"): ("parent", "size"),
    ("Compositor", "render_update"): ("full", "screen_stack", "simplify"),
    ("Compositor", "render_partial_update"): (),
    ("Compositor", "update_widgets"): ("widgets",),
}

#: private attributes read or set on live objects: (object, name) -> what it must be
ATTRIBUTES: dict[tuple[str, str], type | tuple[type, ...]] = {
    **{
        ("widget", name): bool
        for name in (
            *("_layout_required", "_scroll_required", "_repaint_required", "_recompose_required"),
            *("_refresh_styles_required", "_closing", "_pruning", "_is_mounted"),
        )
    },
    ("widget", "_layout_updates"): int,
    ("widget", "_parent"): Widget,
    ("widget", "_next_callbacks"): list,
    ("widget", "_styles_cache"): object,
    ("widget", "_bindings"): BindingsMap,
    ("styles", "_cache_key"): int,
    ("screen", "_compositor"): object,
    ("screen", "_dirty_widgets"): set,
    ("screen", "_update_timer"): object,
    ("screen", "_callbacks"): list,
    ("screen", "_layout_required"): bool,
    ("compositor", "_dirty_regions"): set,
    ("app", "_batch_count"): int,
    ("app", "_exit"): bool,
    ("footer", "_bindings_ready"): bool,
    ("message", "_stop_propagation"): bool,
    ("parser", "_timeout_time"): (float, type(None)),
    **{
        ("table", name): object
        for name in (
            *("_cell_render_cache", "_row_render_cache", "_line_cache", "_row_renderable_cache", "_data"),
            *("_row_locations", "_column_locations", "_header_row_key", "_pseudo_class_state"),
        )
    },
    ("table", "_update_count"): int,
    ("table", "_show_hover_cursor"): bool,
    ("table", "_labelled_row_exists"): bool,
    ("table", "_row_label_column_width"): int,
}
#: set by a class's __init__ (no live one here): the class and the source line that sets it
SET_IN_INIT = {("driver", "_debug"): ("textual.driver.Driver", "self._debug")}


def named() -> set[str]:
    names = set(MODULES) | {name for _, name in METHODS} | {name for _, name in ATTRIBUTES}
    return names | {name for _, name in SET_IN_INIT} | {f"def {name}" for _, name in METHODS}


def test_every_private_the_adapter_reaches_is_named_here() -> None:
    reached = {reach.name for reach in all_reaches(inside_adapter=True)}
    assert reached - named() == set(), "a private used in gpumon/tui/textual_private/ but not checked here"


def test_the_private_modules_hold_what_gpumon_imports() -> None:
    import importlib

    for module, names in MODULES.items():
        imported = importlib.import_module(module)
        assert [n for n in names if not hasattr(imported, n)] == [], module


def test_the_private_methods_take_what_gpumon_passes() -> None:
    from textual._compositor import Compositor

    classes: dict[str, type] = {"DataTable": DataTable, "Select": Select, "Widget": Widget, "Screen": Screen}
    classes |= {"App": App, "Compositor": Compositor}
    for (owner, name), params in METHODS.items():
        method = getattr(classes[owner], name, None)
        assert callable(method), f"{owner}.{name} is gone"
        found = [p for p in inspect.signature(method).parameters if p not in ("self", "cls")]
        assert tuple(found) == params, f"{owner}.{name}{tuple(found)}"
    assert callable(DataTable._get_styles_to_render_cell.cache_clear)  # an lru_cache, cleared on a style change


class Table(App[None]):
    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable()
        table.add_columns("a", "b")
        table.add_row("1", "2", key="r")
        yield table
        yield Footer()


async def test_the_private_attributes_are_there_on_live_objects() -> None:
    from textual._xterm_parser import XTermParser

    app = Table()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(DataTable)
        await pilot_until(pilot, lambda: table.is_mounted and table.size.width > 0)
        objects: dict[str, object] = {"widget": table, "styles": table.styles, "screen": app.screen, "app": app}
        objects |= {"compositor": app.screen._compositor, "footer": app.query_one(Footer), "table": table}
        objects |= {"message": Message(), "parser": XTermParser()}
        wrong = {
            f"{owner}.{name}": type(getattr(objects[owner], name, None)).__name__
            for (owner, name), kind in ATTRIBUTES.items()
            if not isinstance(getattr(objects[owner], name, None), kind)
        }
        assert wrong == {}, "gone or of another type"
        assert table._get_row_style(0, Style()) is not None  # callable as row_draw.py calls it
    for (_owner, name), (where, line) in SET_IN_INIT.items():
        module, cls = where.rsplit(".", 1)
        assert line in inspect.getsource(getattr(__import__(module, fromlist=[cls]), cls).__init__), name


def test_the_app_runs_without_textuals_private_modules() -> None:
    """A Textual whose private modules moved: the app starts, draws, switches views and opens the help, with
    Textual's own frames, driver and first showings (nothing drawn ahead)."""
    code = """
import asyncio, sys
import textual.app, textual.screen, textual.drivers.linux_driver  # Textual itself loaded, as it would be
from textual.widgets import DataTable, Footer, Select
for name in ("textual._compositor", "textual._xterm_parser", "textual._parser", "textual.widgets._footer"):
    sys.modules[name] = None  # importing it now fails: moved
from gpumon.tui.textual_private.escape import quick_driver
from gpumon.tui.textual_private.dirty_lines import DirtyLines
from tests.conftest import make_app, pilot_until

async def main():
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: not app.drawing_unseen(), "the work ahead never ended")
        assert type(app.screen._compositor) is not DirtyLines, "the frames go Textual's way"
        assert app.ahead.unseen.failed is not None
        await pilot.press("r")
        await pilot_until(pilot, lambda: app.view_widget("runs").region.height > 0, "no Runs view")
        await pilot.press("question_mark")
        await pilot_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen", "no help")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: app.screen is app.screen_stack[0], "the help stayed")
    assert quick_driver() is None
    print("ran")

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ran"), done.stderr[-3000:]


def _without(obj: object, name: str, then: Callable[[], object]) -> object:
    """``then()`` with the instance attribute ``name`` taken off ``obj`` (as a Textual that renamed it)."""
    kept = obj.__dict__.pop(name)
    try:
        return then()
    finally:
        obj.__dict__[name] = kept


async def test_the_node_readers_answer_publicly_where_a_private_is_gone() -> None:
    app = Table()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(DataTable)
        await pilot_until(pilot, lambda: table.is_mounted)
        assert _without(table, "_pruning", lambda: nodes.taken_down(table)) is False  # attached: not going
        assert _without(table, "_bindings", lambda: nodes.key_bindings(table)) is None
        message = Message()
        message.stop()
        assert nodes.propagation_stopped(message)
        assert _without(app, "_exit", lambda: nodes.exiting(app)) is False
