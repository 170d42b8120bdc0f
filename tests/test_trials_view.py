"""Pilot tests of the Trials view, fed from recorded Tune events (tests/trials_data.py).

What a user sees (header, rows, colours, ★), what each key does (sort, reverse,
filter, experiment, metric, stop with confirmation, read-only), and that a live
experiment's rows change in place (same row keys, never cleared and refilled).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.worker import Worker, WorkerState

from gpumon.core.events import EventWriter
from gpumon.core.format import size
from gpumon.tui.app import GpumonApp
from gpumon.tui.views.trials.experiment_table import ExperimentTable
from gpumon.tui.views.trials.trial_table import TrialTable
from gpumon.tui.views.trials.view import TrialsView
from gpumon.tui.widgets.charts import Chart
from gpumon.tui.widgets.log_view import LogView
from gpumon.tui.widgets.screens import ConfirmScreen
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import notes, screen_text
from tests.trials_data import DONE, ERROR_TEXT, LIVE, live_trials, record_done, record_live, write_results


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    return tmp_path


async def open_trials(pilot: Pilot[None], rows: int) -> TrialTable:
    await pilot.press("t")
    table = pilot.app.query_one(TrialTable)
    await pilot_until(pilot, lambda: table.row_count == rows)
    return table


def cell(table: TrialTable, trial_id: str, column: str) -> str:
    return table.get_cell(trial_id, column).text.plain


def header(app: GpumonApp) -> str:
    return str(app.query_one("#trials-header").render())


async def select(pilot: Pilot[None], trial_id: str) -> None:
    app = pilot.app
    assert isinstance(app, GpumonApp)
    app.query_one(TrialTable).select_trial(trial_id)
    await pilot_until(pilot, lambda: app.query_one(TrialsView).trial_id == trial_id)
    view = app.query_one(TrialsView)
    await pilot_until(pilot, lambda: view.snapshot is not None and view.snapshot.curves is not None)


async def test_no_experiment_says_how_to_start_one(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("t")
        await pilot_until(pilot, lambda: app.view == "trials", "t never opened Trials", 30)
        empty = app.query_one("#trials-empty")
        await pilot_until(pilot, lambda: empty.display)
        text = screen_text(app)
        assert "No Ray Tune experiments yet" in text and "gpumon tune SEARCH.toml" in text
        assert "gpumon launch script" in text and "unchanged" in text and "RAY_TUNE_CALLBACKS" in text  # README
        assert "GpumonCallback" not in text
        assert not app.query_one(TrialTable).display


async def test_header_and_rows_of_an_ended_experiment(home: Path) -> None:
    record_done(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trials(pilot, 6)
        text = header(app)
        assert f"{DONE} · finished · digits-asha · optuna / asha · loss (min) · trials 6/6 · 2 errors" in text
        assert (
            "★ best a1b2c_00001  loss=0.2500 (last result, as Tune ranks)  batch_size=64  lr=0.01  model.width=128"
            in text
        )
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[:6] == ["TRIAL", "STATUS", "batch_size", "lr", "model.width", "ITER"]
        assert "epochs" not in labels  # a constant, not a searched parameter
        assert {"loss", "acc", "BEST", "TIME", "GPU MEM"} <= set(labels)
        assert table.row_keys() == [f"a1b2c_0000{i}" for i in range(6)]  # by trial id at first
        assert cell(table, "a1b2c_00002", "status") == "ERROR"
        assert table.get_cell("a1b2c_00002", "status").text.style == "bold red"
        assert table.get_cell("a1b2c_00000", "status").text.style == "dim"
        assert cell(table, "a1b2c_00001", "best") == "0.2500 ★"
        assert [k for k in table.row_keys() if "★" in cell(table, k, "best")] == ["a1b2c_00001"]
        assert cell(table, "a1b2c_00001", "time") == "40s" and cell(table, "a1b2c_00001", "iter") == "4"
        assert cell(table, "a1b2c_00001", "p:model.width") == "128"
        assert cell(table, "a1b2c_00001", "gpu") == "–"  # no GPU process has that pid
        assert cell(table, "a1b2c_00005", "iter") == "" and cell(table, "a1b2c_00005", "m:loss") == ""
        assert "trials · 6" in str(table.border_title) and "sort TRIAL ↑" in str(table.border_subtitle)


async def test_s_cycles_the_sort_column_r_reverses_and_a_header_click_sorts(home: Path) -> None:
    record_done(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trials(pilot, 6)
        while table.sort_key != "m:loss":
            was = table.sort_key
            await pilot.press("s")
            # handled after press returns under load: unwaited, the loop pressed again and went past loss
            await pilot_until(pilot, lambda was=was: table.sort_key != was, "s never changed the sort", 30)
        assert "sort loss ↑" in str(table.border_subtitle)  # mode min: the lowest first
        by_loss = ["a1b2c_00001", "a1b2c_00004", "a1b2c_00000", "a1b2c_00003", "a1b2c_00002", "a1b2c_00005"]
        assert table.row_keys() == by_loss  # no loss at all sorts last
        await pilot.press("R")
        await pilot_until(pilot, lambda: table.sort_reverse, "R never reversed the sort", 30)
        assert table.row_keys() == [*by_loss[-2::-1], "a1b2c_00005"]  # still last: it has no loss
        assert "sort loss ↓" in str(table.border_subtitle)
        x = 1 + sum(width + 2 for key, _, width in table.column_set[: [c[0] for c in table.column_set].index("iter")])
        await pilot.click(TrialTable, offset=(x + 2, 1))  # the ITER header
        assert table.sort_key == "iter" and table.sort_reverse  # most iterations first
        assert table.row_keys()[:3] == ["a1b2c_00001", "a1b2c_00004", "a1b2c_00000"]  # ties by id, reversed too
        await pilot.click(TrialTable, offset=(x + 2, 1))
        assert not table.sort_reverse and table.row_keys()[:2] == ["a1b2c_00002", "a1b2c_00003"]
        assert table.row_keys()[-1] == "a1b2c_00005"


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The view's reads of the experiments, counted as they arrive [done, failed]: a test of what a refresh keeps
    or does not say again waits for refreshes, not a fixed time (beside CPU hogs, maybe no read at all)."""
    reads = [0, 0]
    apply, changed = TrialsView.apply, TrialsView.on_worker_state_changed

    def applied(self: TrialsView, *args: Any) -> None:
        reads[0] += 1
        apply(self, *args)

    def state_changed(self: TrialsView, event: Worker.StateChanged) -> None:
        if event.worker.group == "trials-feed" and event.state == WorkerState.ERROR:
            reads[1] += 1
        changed(self, event)

    monkeypatch.setattr(TrialsView, "apply", applied)
    monkeypatch.setattr(TrialsView, "on_worker_state_changed", state_changed)
    return reads


async def test_f_filters_by_status(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = count_reads(monkeypatch)
    record_done(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trials(pilot, 6)
        await pilot.press("f")
        await pilot_until(pilot, lambda: table.status_filter == "ERROR", "f never filtered ERROR", 30)
        assert table.row_keys() == ["a1b2c_00002", "a1b2c_00005"]
        assert "trials · 2 of 6 ERROR" in str(table.border_title) and "filter ERROR" in str(table.border_subtitle)
        await pilot.press("f")
        await pilot_until(pilot, lambda: table.status_filter == "TERMINATED", "f never went on to TERMINATED", 30)
        assert len(table.row_keys()) == 4
        await pilot.press("f")
        await pilot_until(pilot, lambda: table.status_filter is None, "f never cleared the filter", 30)
        assert table.row_count == 6
        read = reads[0]
        await pilot_until(pilot, lambda: reads[0] > read, "no refresh")
        await pilot.press("f")
        read = reads[0]
        await pilot_until(pilot, lambda: reads[0] > read, "no refresh")  # a refresh keeps the filter
        assert table.row_keys() == ["a1b2c_00002", "a1b2c_00005"]


async def test_selecting_a_trial_shows_its_curve_and_its_error(home: Path) -> None:
    record_done(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        await open_trials(pilot, 6)
        chart = app.query_one("#trial-chart", Chart)
        error = app.query_one("#trial-error", LogView)
        await select(pilot, "a1b2c_00001")
        await pilot_until(pilot, lambda: len(chart.series) == 1)
        assert tuple(chart.series[0].values) == (0.8, 0.5, 0.3, 0.25)
        assert tuple(chart.series[0].steps) == (1, 2, 3, 4)
        assert chart.border_title == "loss / iteration · a1b2c_00001"
        assert any(0x2800 < ord(c) <= 0x28FF for c in chart.render().plain)  # Braille dots drawn
        assert error.lines == () and "trial a1b2c_00001 · TERMINATED · iter 4 · 40s" in screen_text(app)
        await pilot.press("m")  # the chart's next metric
        await pilot_until(pilot, lambda: chart.border_title == "acc / iteration · a1b2c_00001")
        assert tuple(chart.series[0].values) == (0.6, 0.75, 0.85, 0.875)
        await select(pilot, "a1b2c_00002")
        await pilot_until(pilot, lambda: error.lines == tuple(ERROR_TEXT.splitlines()))
        assert error.has_class("-failed") and "ValueError: lr 0.3 diverged" in screen_text(app)


async def test_a_live_experiment_changes_in_place(home: Path) -> None:
    run_dir = record_live(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trials(pilot, 3)
        assert f"{LIVE} · running" in header(app) and "trials 1/8 · 2 running" in header(app)
        assert table.get_cell("f00d1_00001", "status").text.style == "bold green"
        keys = {str(k.value): k for k in table.rows}
        assert cell(table, "f00d1_00002", "iter") == "1"
        trials = live_trials()
        writer = EventWriter(run_dir, "tune")
        trials[2].losses += [0.2, 0.1]
        write_results(writer, trials[2], start=1)
        writer.write("trial_end", trial_id="f00d1_00002", status="TERMINATED")
        writer.write("trial_start", trial_id="f00d1_00003", config={"lr": 0.16, "batch_size": 8})
        writer.close()
        await pilot_until(pilot, lambda: table.row_count == 4)
        await pilot_until(pilot, lambda: cell(table, "f00d1_00002", "iter") == "3")
        assert cell(table, "f00d1_00002", "status") == "TERMINATED" and cell(table, "f00d1_00002", "best") == "0.1000 ★"
        assert cell(table, "f00d1_00000", "best") == "0.5000  "  # the ★ moved
        assert all(next(k for k in table.rows if k.value == key) is row_key for key, row_key in keys.items())
        assert "trials 2/8" in header(app)


async def test_gpu_memory_of_a_trials_process(home: Path) -> None:
    record_live(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trials(pilot, 3)
        assert app.context.snapshot is not None
        process = next(p for p in app.context.snapshot.gpu.devices[0].processes if p.pid == 5_000_000)
        assert cell(table, "f00d1_00001", "gpu") == size(process.used_memory)
        assert cell(table, "f00d1_00000", "gpu") == "–"
        await select(pilot, "f00d1_00001")
        assert f"pid 5000000 · GPU {size(process.used_memory)}" in screen_text(app)


async def test_stop_a_trial_and_the_search_after_confirmation(home: Path) -> None:
    run_dir = record_live(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trials(pilot, 3)
        await select(pilot, "f00d1_00000")  # terminated: nothing to stop
        await pilot.press("x")
        # a key goes on from the focused table as a message: under load it is handled after press returns
        refused = "Trial f00d1_00000 is not running (TERMINATED)"
        await pilot_until(pilot, lambda: any(refused in n for n in notes(app)), "x was never refused", 30)
        assert not isinstance(app.screen, ConfirmScreen)
        await select(pilot, "f00d1_00001")
        await pilot.press("x")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "x never asked", 30)
        assert isinstance(app.screen, ConfirmScreen) and "Stop trial f00d1_00001" in app.screen.question
        await pilot.press("n")
        await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "n never answered", 30)
        assert not (run_dir / "control").exists()
        await pilot.press("x")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "x never asked again", 30)
        await pilot.press("y")
        stops = run_dir / "control" / "stop-trials"
        await pilot_until(pilot, stops.exists)
        assert stops.read_text() == "f00d1_00001\n"
        await pilot_until(pilot, lambda: cell(table, "f00d1_00001", "status") == "STOPPING")
        assert any("Asked" in n and "trial f00d1_00001" in n for n in notes(app))
        writer = EventWriter(run_dir, "tune")
        writer.write("trial_end", trial_id="f00d1_00001", status="TERMINATED")  # Tune ended it, as asked
        writer.close()
        await pilot_until(pilot, lambda: cell(table, "f00d1_00001", "status") == "STOPPED")  # not a finished trial's
        assert cell(table, "f00d1_00000", "status") == "TERMINATED"
        await pilot.press("X")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "X never asked", 30)
        assert isinstance(app.screen, ConfirmScreen) and f"Stop the whole search {LIVE}" in app.screen.question
        await pilot.press("y")
        await pilot_until(pilot, (run_dir / "control" / "stop").exists)
        await pilot_until(pilot, lambda: "stop requested" in header(app))
        assert cell(table, "f00d1_00002", "status") == "STOPPING"


async def test_readonly_stops_nothing(home: Path) -> None:
    run_dir = record_live(home)
    app = make_app(gpus=1, readonly=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await open_trials(pilot, 3)
        await select(pilot, "f00d1_00001")
        await pilot.press("x", "X")
        await pilot_until(pilot, lambda: sum("Read-only" in n for n in notes(app)) >= 2, "x or X never refused", 30)
        assert not isinstance(app.screen, ConfirmScreen)
        assert sum("Read-only" in n for n in notes(app)) == 2
        # the keys were handled (their notes); a stop asked anyway would be a worker: once all are done, none
        # can still write the control file
        await pilot.pause()
        await pilot_until(pilot, lambda: all(w.is_finished for w in app.workers), "a worker never ended")
        assert not (run_dir / "control").exists()


async def test_experiments_are_listed_newest_first_and_e_switches(home: Path) -> None:
    record_done(home)
    record_live(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trials(pilot, 3)
        experiments = app.query_one(ExperimentTable)
        assert [str(r.key.value) for r in experiments.ordered_rows] == [LIVE, DONE]
        assert "experiments · 2 · 1 live" in str(experiments.border_title)
        assert LIVE in header(app)
        await pilot.press("e")
        await pilot_until(pilot, lambda: table.row_count == 6 and DONE in header(app))
        assert table.row_keys()[0] == "a1b2c_00000"
        await pilot.press("E")
        await pilot_until(pilot, lambda: table.row_count == 3 and LIVE in header(app))


async def test_trials_keys_act_only_in_the_trials_view(home: Path) -> None:
    record_done(home)
    app = make_app(gpus=2)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("tab", "T")  # SIGTERM is T, in the GPUs view only (a simulated process: refused at once)
        await pilot_until(pilot, lambda: any("nothing to send SIGTERM" in n for n in notes(app)), "T never refused", 30)
        await pilot.press("t")  # t opens Trials from every view, the process table's too
        await pilot_until(pilot, lambda: app.view == "trials", "t never opened Trials", 30)
        footer = set(app.screen.active_bindings)
        assert {"s", "f", "e", "x", "X", "R", "m", "g", "r"} <= footer and not {"a", "n", "l", "K"} & footer
        await pilot.press("g")
        await pilot_until(pilot, lambda: app.view == "gpus", "g never went back to the GPUs", 30)
        assert app.view == "gpus" and app.screen.active_bindings["s"].binding.action == "sort"


async def test_a_read_error_is_shown_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = count_reads(monkeypatch)
    home = tmp_path / "not-a-dir"
    home.write_text("")
    monkeypatch.setenv("GPUMON_HOME", str(home))  # the state dir cannot be created
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("t")
        await pilot_until(pilot, lambda: any("Could not read experiments" in n for n in notes(app)))
        failed = reads[1]
        await pilot_until(pilot, lambda: reads[1] >= failed + 2, "no more failed reads")  # each said again?
        assert sum("Could not read experiments" in n for n in notes(app)) == 1
        assert app.is_running and app.view == "trials"
