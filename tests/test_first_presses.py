"""A key's first press costs what a later press costs: what the first showing of a view's footer keys and of the help
did on the key's path is done unseen, shortly after the start.

Counted as bench/keys_counted.py counts them (round 1 against later rounds), up to the key's frame, never time.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from textual import events
from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget

from gpumon.tui.app import GpumonApp
from gpumon.tui.app_ahead import WorkAhead
from gpumon.tui.textual_private.footer import FooterKey
from gpumon.tui.widgets.footer import KeysFooter
from gpumon.tui.widgets.screens import HelpScreen
from tests.conftest import make_app, pilot_until
from tests.test_key_paths import counting, drawing, to_the_frame
from tests.test_runs_view import home, record_runs  # noqa: F401 - home: the fixture

#: bench/keys_counted.py's view keys, in its order
VIEW_KEYS = (
    ("r", "runs"), ("g", "gpus"), ("t", "trials"), ("d", "doctor"), ("h", "fleet"), ("exclamation_mark", "alerts")
)  # fmt: skip


async def drawn_ahead(pilot: Any) -> None:
    """What the app draws ahead, unseen, is drawn (the views, the footer's keys, the help): a count that began before
    would count it."""
    app = pilot.app
    await pilot_until(pilot, lambda: not app.drawing_unseen() and all(w.is_finished for w in app.workers))


def footer_keys_drawn(monkeypatch: pytest.MonkeyPatch, count: list[str]) -> None:
    """Each footer key whose text is rendered goes into ``count``."""
    drawing(monkeypatch, count, lambda w: f"drew {w.key} ({w.description})" if isinstance(w, FooterKey) else None)


async def test_each_views_first_key_draws_none_of_its_footer_keys(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The footer's keys of each view were built and measured ahead, but drawn at their set's first showing: 8-10 keys
    rendered on the first `r`, `d`, `h`, `!` (17 widgets rendered on the first `r` against a later one's 7: 70 ms
    against 35, counted). Each hidden set is laid out and drawn unseen shortly after the start: no key is drawn on a
    view key's path, first press or later, and the keys shown are those of the view."""
    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        footer = app.query_one(KeysFooter)
        await pilot_until(pilot, lambda: len(app.context.runs) == 3)
        await drawn_ahead(pilot)
        await pilot.pause(0.2)
        built = len(footer.query(FooterKey))
        for round_ in (1, 2):
            for key, view in VIEW_KEYS:
                count: list[str] = []
                footer_keys_drawn(monkeypatch, count)
                with to_the_frame(monkeypatch, app, lambda view=view: app.view == view, count) as at_frame:
                    await pilot.press(key)
                    await pilot_until(pilot, lambda: bool(at_frame))
                monkeypatch.undo()
                assert at_frame[0] == [], (round_, key, at_frame[0])
                assert footer._shown == footer.keys_now()  # the view's own keys show (no set left to build)
                await pilot.pause(0.2)
        assert len(footer.query(FooterKey)) == built  # each set built ahead: none built on a key's path


async def test_a_set_of_keys_drawn_ahead_shows_as_one_built_and_fitted_when_first_shown(
    home: Path,  # noqa: F811
) -> None:
    """What a set drawn unseen shows is what Textual's own first showing would: each key where a fresh layout of the
    screen puts it, and the same keys left out at this width."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        footer = app.query_one(KeysFooter)
        await drawn_ahead(pilot)
        await pilot.press("r")
        await pilot_until(pilot, lambda: app.view == "runs")
        await pilot.pause(0.2)
        shown = shown_keys(app)
        assert shown  # (100 columns: some keys left out)
        app.screen._refresh_layout(app.size)  # laid out anew, as Textual would
        assert shown_keys(app) == shown
        assert footer._shown is not None
        keys = [key for key in footer._sets[footer._shown].members if isinstance(key, FooterKey) and key.display]
        lines = [key.render_line(0).text for key in keys]
        for key in keys:
            key.refresh()  # drawn anew
        assert [key.render_line(0).text for key in keys] == lines


async def test_each_views_first_key_measures_no_widget_a_later_press_does_not(
    home: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Laying a hidden view or set of keys out unseen set each widget's virtual size, which asked for a layout Textual
    did after the unseen one, out of its reach: the first showing measured those widgets again on its key's path (each
    footer key's text on the first `r`, `d`, `h`, `!`; the selected run's command; the doctor's whole text, ~10 ms).
    Laid out unseen until no widget asks again: a first press measures what a later one measures."""
    record_runs(home, live=False)
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_until(pilot, lambda: len(app.context.runs) == 3)
        await drawn_ahead(pilot)
        await pilot.pause(0.2)
        measured: dict[str, list[list[str]]] = {}
        for _ in range(2):
            for key, view in VIEW_KEYS:
                count: list[str] = []
                counting(monkeypatch, Widget, "get_content_width", count, "width of")
                counting(monkeypatch, Widget, "get_content_height", count, "height of")
                with to_the_frame(monkeypatch, app, lambda view=view: app.view == view, count) as at_frame:
                    await pilot.press(key)
                    await pilot_until(pilot, lambda: bool(at_frame))
                monkeypatch.undo()
                measured.setdefault(key, []).append(sorted(at_frame[0]))
                await pilot.pause(0.2)
        for key, (first, later) in measured.items():
            assert first == later, (key, first, later)


def shown_keys(app: GpumonApp) -> list[tuple[str, Region]]:
    """The footer keys on screen and where."""
    return [(w.key, geometry.region) for w, geometry in app.screen._compositor.layers if isinstance(w, FooterKey)]


async def test_the_first_help_finds_its_screen_laid_out(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The help was laid out unseen ahead, but the scrollbar that layout showed narrowed its text, which asked for a
    second layout: Textual did it at the first `?`, on its path (the help's whole text measured again: 48 ms of main
    thread against a later `?`'s 15). It is laid out until it asks for none: no layout on the first `?`, and the help
    shows as a fresh layout of it does."""
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await drawn_ahead(pilot)
        help_screen = app._installed_screens["help"]
        assert isinstance(help_screen, HelpScreen)
        for _ in range(2):
            laid_out: list[str] = []
            counting(monkeypatch, Screen, "_refresh_layout", laid_out, "laid out")
            with to_the_frame(monkeypatch, app, lambda: app.screen is help_screen, laid_out) as at_frame:
                await pilot.press("question_mark")
                await pilot_until(pilot, lambda: bool(at_frame))
            monkeypatch.undo()
            assert at_frame[0] == [], at_frame
            await pilot.pause(0.2)
            placed = {w: geometry.region for w, geometry in help_screen._compositor.layers}
            help_screen._refresh_layout(app.size)  # as Textual lays it out
            assert {w: geometry.region for w, geometry in help_screen._compositor.layers} == placed
            await pilot.press("escape")
            await pilot_until(pilot, lambda: app.screen is app.screen_stack[0])
            await pilot.pause(0.2)


async def test_a_key_typed_while_work_is_done_ahead_waits_for_one_piece_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The help and the form laid out, six views drawn unseen (20-300 ms each on a loaded machine) were put on the
    app's queue at once: a key typed just after them waited for all of them (the first `r` a second after the start
    took 1.2-1.9 s through tmux). Each piece is queued once the one before has run: a key waits for one at most.
    Queued at once at a piece's end, the next one went on the app's queue before the loop had a turn, and Textual
    takes a pump's messages without a turn of the loop while its queue holds any: a key from the driver's thread
    (put on the queue by the loop) waited for every piece (8 before the key; the first `r` 0.4-1.8 s in tmux)."""
    pieces: list[str] = []
    at_key: list[int] = []
    for name in ("lay_out_screen", "draw_unseen"):
        real = getattr(WorkAhead, name)
        monkeypatch.setattr(
            WorkAhead,
            name,
            lambda self, *a, _real=real, _name=name, **k: (pieces.append(_name), _real(self, *a, **k))[1],
        )
    show, lay_out = GpumonApp.show_view, WorkAhead.lay_out

    def shown(self: GpumonApp, name: str) -> None:
        if name == "runs":
            at_key.append(len(pieces))
        show(self, name)

    def then_a_key(self: WorkAhead, again: bool = True) -> None:
        lay_out(self, again)
        if again:  # `r`, typed as the work ahead is queued: the driver posts it from its own thread, through the loop
            typist = threading.Thread(target=self._app.post_message, args=(events.Key("r", "r"),))
            typist.start()
            typist.join()

    monkeypatch.setattr(GpumonApp, "show_view", shown)
    monkeypatch.setattr(WorkAhead, "lay_out", then_a_key)
    app = make_app(gpus=2)
    with to_the_frame(monkeypatch, app, lambda: bool(at_key) and app.view == "runs", pieces) as at_frame:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot_until(pilot, lambda: at_key, "the r typed never showed the Runs view")
            await drawn_ahead(pilot)
            assert at_key[0] <= 1, f"{at_key[0]} pieces of the work ahead ran before the key"
            # nor between the key's way and its frame (a piece ran there: the frame came 20-45 ms later at rest)
            assert len(at_frame[0]) == at_key[0], at_frame[0][at_key[0] :]
            assert len(pieces) >= 6, pieces  # and the work went on after it
