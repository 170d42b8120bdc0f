"""htop's keys where htop has them (issue 35): F3 search, F4 filter as you type, F5 tree, F6 sort by, F9 kill
with its confirmation, Home/End in every table; the views moved to letters and Alt+letter."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from gpumon.core.model import GpuProcess
from gpumon.tui.views.gpus.view import GpusView
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ChoiceScreen, ConfirmScreen
from tests.conftest import make_app, notes, pilot_until
from tests.test_runs_view import FAILED, FINISHED, STOPPED, record_runs


def rows(table: ProcessTable) -> list[GpuProcess]:
    return [table.processes[str(row.key.value)] for row in table.ordered_rows]


async def test_f3_finds_a_process_as_you_type_and_again_finds_the_next() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot.press("a")  # every GPU's processes
        await pilot_until(pilot, lambda: table.row_count >= 3)
        procs = rows(table)
        user = procs[-1].user or ""
        mine = [i for i, p in enumerate(procs) if p.user == user]
        await pilot.press("f3")
        box = app.query_one("#process-search", Input)
        assert box.display and box.has_focus
        await pilot.press(*user)
        assert table.cursor_row == mine[0]  # the first match from the top, as the letters come
        await pilot.press("f3")
        assert table.cursor_row == (mine[1] if len(mine) > 1 else mine[0])  # F3 again: the next one
        await pilot.press(*"zzz-nobody")
        assert box.has_class("-no-match")
        await pilot.press("escape")
        assert not box.display and table.has_focus
        assert table.row_count == len(procs)  # a search never hides rows


async def test_f4_and_slash_filter_as_you_type() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot.press("a")
        await pilot_until(pilot, lambda: table.row_count >= 3)
        every = table.row_count
        pid = str(rows(table)[0].pid)
        for key in ("f4", "slash"):
            await pilot.press(key)
            await pilot.press(*pid)
            assert table.row_count == 1, key  # before enter: as htop does
            await pilot.press("escape")
            assert table.row_count == every


async def test_f5_tree_f6_sort_by_and_home_end() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot.press("a")
        await pilot_until(pilot, lambda: table.row_count >= 3)
        await pilot.press("f5")
        assert table.tree_mode
        await pilot.press("f5")
        assert not table.tree_mode
        await pilot.press("f6")
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("home")
        first = app.screen.choices[0][0]
        await pilot.press("enter")
        assert not isinstance(app.screen, ChoiceScreen) and table.sort_key == first
        table.focus()
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("home")
        assert table.cursor_row == 0


async def test_f9_picks_a_signal_then_asks_before_sending() -> None:
    app = make_app(gpus=2, readonly=False)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count >= 1)
        table.focus()
        await pilot.press("f9")
        await pilot_until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        assert isinstance(app.screen, ChoiceScreen)
        assert [v for v, _ in app.screen.choices][:2] == ["SIGTERM", "SIGKILL"]
        await pilot.press("down", "enter")  # SIGKILL
        # a simulated process is never signalled: said at once instead of a question whose answer changes nothing
        # (the choice's callback says it, on the app's loop: waited for, and kept by notes() past its toast's end)
        await pilot_until(pilot, lambda: any("simulated" in n.lower() for n in notes(app)), "no note", 30)
        assert not isinstance(app.screen, (ChoiceScreen, ConfirmScreen))


async def test_view_keys_are_letters_and_alt_letters_and_f_keys_no_longer_switch_views() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        for key, view in (("alt+r", "runs"), ("alt+g", "gpus"), ("r", "runs"), ("g", "gpus")):
            await pilot.press(key)
            assert app.view == view, key
        for key in ("f2", "f3", "f4", "f5", "f6"):
            await pilot.press(key)
            if isinstance(app.screen, ChoiceScreen):
                await pilot.press("escape")
            box = app.query_one(GpusView).query_one("#process-search", Input)
            if box.has_focus:
                await pilot.press("escape")
            assert app.view == "gpus", key


async def test_runs_view_filters_as_you_type_and_f9_asks_how_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    record_runs(tmp_path, live=False)
    ids = [FINISHED, FAILED, STOPPED]
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        table = app.query_one(RunTable)
        await pilot_until(pilot, lambda: table.row_count == len(ids))
        await pilot.press("f4")
        await pilot.press(*ids[0])
        await pilot_until(pilot, lambda: table.row_count == 1)  # before enter
        await pilot.press("escape")
        await pilot_until(pilot, lambda: table.row_count == len(ids))
        await pilot.press("f9")
        await pilot_until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        assert isinstance(app.screen, ChoiceScreen)
        assert [v for v, _ in app.screen.choices] == ["stop", "kill"]
        await pilot.press("escape")
        assert not isinstance(app.screen, ChoiceScreen)


async def test_trials_opened_before_the_first_experiment_take_focus_when_it_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpumon.tui.views.trials.trial_table import TrialTable
    from gpumon.tui.views.trials.view import TrialsView
    from tests.trials_data import record_done

    focused_with_rows: list[bool] = []  # after each showing with rows: was the table focused already?
    apply = TrialsView.apply

    def recorded(view: TrialsView, *args: object) -> None:
        apply(view, *args)  # type: ignore[arg-type]
        if view.table.row_count:
            focused_with_rows.append(view.screen.focused is view.table)

    monkeypatch.setattr(TrialsView, "apply", recorded)
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t")
        await pilot_until(pilot, lambda: app.query_one("#trials-empty").display)
        record_done(tmp_path)  # the first experiment arrives while the view shows
        table = app.query_one(TrialTable)
        await pilot_until(pilot, lambda: table.row_count > 0 and table.has_focus)  # before: nothing focused
        # focused as the rows come, not a frame later: a key pressed as they show acts (beside hogs `e` was lost)
        assert focused_with_rows[0]
        await pilot.press("s")  # the view's keys work at once, without tab
        assert table.sort_key != "id"
