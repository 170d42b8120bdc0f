"""A view key's own frame shows the view as it is: what came while the view was hidden is drawn before that frame,
not after it, and a view's first showing finds its rows and blocks built.

A hidden view holds what its feeds bring (the Runs list, each GPU sample, the fleet's state) and drew it only once
shown: after the key's frame (on Show, on Resize, in ``shown``), so a second frame followed, and the first `r` showed
an empty table until its 20 rows were built and drawn (the key's slowest draw, 300-500 ms).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.screen import Screen

from gpumon.tui.app_ahead import HELP
from gpumon.tui.feeds import SampleReady
from gpumon.tui.textual_private.footer import FooterKey
from gpumon.tui.views import VIEWS
from gpumon.tui.views.fleet.view import FleetView
from gpumon.tui.views.gpus.view import GpusView
from gpumon.tui.views.runs.launch_form import LaunchForm
from gpumon.tui.views.runs.launching import FORM
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.widgets.footer import KeysFooter
from gpumon.tui.widgets.screens import HelpScreen
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import home, record_runs  # noqa: F401 - home: the fixture

RUNS = 3  # record_runs(live=False)


def at_first_layout(monkeypatch: pytest.MonkeyPatch, what: Callable[[], Any]) -> list[Any]:
    """``what()`` as each layout of the screen starts (the first after a key: the key's frame)."""
    seen: list[Any] = []
    lay_out = Screen._refresh_layout

    def counted(self: Screen[object], *args: Any, **kwargs: Any) -> None:
        seen.append(what())
        lay_out(self, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counted)
    return seen


async def test_the_first_r_draws_the_runs_in_its_own_frame(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(RunTable)
        await pilot_until(pilot, lambda: len(app.context.runs) == RUNS)  # the runs feed read them (hidden view)
        await pilot.pause(0.3)
        seen = at_first_layout(monkeypatch, lambda: (app.view, table.row_count, str(table.border_title)))
        await pilot.press("r")
        await pilot_until(pilot, lambda: any(view == "runs" for view, _, _ in seen))
        _, rows, title = next(s for s in seen if s[0] == "runs")
        assert rows == RUNS, seen  # built before the key, drawn in its frame
        assert title.startswith(f"runs · {RUNS}")


async def test_a_view_key_draws_what_came_while_hidden_before_its_frame(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fleet view built its host blocks at its first showing, after the key's frame (a second frame).
    (The GPUs view's sample that came while hidden is drawn after `g`'s frame, on purpose: test_key_paths.py.)"""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        gpus, fleet = app.view_widget("gpus"), app.view_widget("fleet")
        assert isinstance(gpus, GpusView) and isinstance(fleet, FleetView)
        assert fleet._blocks  # built from the first sample, never shown
        await pilot.press("r")
        await pilot_until(pilot, lambda: app.view == "runs")
        app.post_message(SampleReady(app.sampler.sample_once()))  # a sample while the Runs view shows
        await pilot_until(pilot, lambda: gpus._pending is not None and fleet._stale)
        seen = at_first_layout(monkeypatch, lambda: (app.view, gpus._pending, fleet._stale, len(fleet._blocks)))
        await pilot.press("h")
        await pilot_until(pilot, lambda: any(s[0] == "fleet" for s in seen))
        assert next(s for s in seen if s[0] == "fleet")[2:] == (False, 1)


async def test_the_first_keys_find_the_help_the_form_and_each_views_keys_built(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first `?` built the help, the first `n` (typed soon after `r`) the launch form, and each view's first
    key its footer keys (~10 keys mounted and styled): 50-500 ms on the key's path, each key's slowest press.
    They are built shortly after the start, and the first presses build none of them."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        footer = app.query_one(KeysFooter)
        await pilot_until(pilot, lambda: app.is_screen_installed(HELP) and app.is_screen_installed(FORM))
        await pilot_until(pilot, lambda: len(footer._sets) == len(VIEWS))  # the GPUs view's and 5 built ahead
        await pilot_until(pilot, lambda: all(k.is_mounted for k in footer.query(FooterKey)))
        built: list[str] = []
        make_key, compose_help = FooterKey.__init__, HelpScreen.compose

        def counted_key(self: FooterKey, *args: Any, **kwargs: Any) -> None:
            built.append(f"key {args[0]} in {app.view}")
            make_key(self, *args, **kwargs)

        def counted_help(self: HelpScreen) -> Any:
            built.append("help")
            return compose_help(self)

        monkeypatch.setattr(FooterKey, "__init__", counted_key)
        monkeypatch.setattr(HelpScreen, "compose", counted_help)
        for key, shows in (("r", "runs"), ("t", "trials"), ("d", "doctor"), ("h", "fleet"), ("!", "alerts")):
            await pilot.press(key)
            await pilot_until(pilot, lambda shows=shows: app.view == shows)
            await pilot.pause(0.2)
        await pilot.press("r", "n")
        await pilot_until(pilot, lambda: isinstance(app.screen, LaunchForm))
        await pilot.press("escape", "question_mark")
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause(0.2)
        assert built == []
