"""Pilot tests of the Runs view's full-screen log (o), run comparison (space, c) and log-scale loss chart (y).

Runs are recorded in a temporary state dir as in test_runs_view.py; logs are real files, appended to
while the screen shows them.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import psutil
import pytest
from textual.pilot import Pilot

from gpumon.core.runs.record.spec import RunSpec
from gpumon.tui.app import GpumonApp
from gpumon.tui.views.runs.compare import CompareScreen
from gpumon.tui.views.runs.log_pane import LogPane
from gpumon.tui.views.runs.log_parts import StreamedLog
from gpumon.tui.views.runs.log_screen import LogScreen
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.widgets.charts import Chart
from tests.conftest import make_app, pilot_until
from tests.test_key_paths import counting
from tests.test_runs_view import (
    FAILED,
    FINISHED,
    STOPPED,
    T0,
    notes,
    open_runs,
    record_run,
    record_runs,
    screen_text,
    select,
)

SEARCHED = "ddp-1121-110000-s0s0"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def record_searchable(home: Path, live: bool = False) -> Path:
    """A run whose rank 0 log has 300 lines, every 50th a bracketed checkpoint line; rank 1 and a launcher log."""
    lines = []
    for i in range(300):
        lines.append(f"[rank0] step {i} saved checkpoint [bold]ckpt-{i}[/bold]" if i % 50 == 7 else f"step {i} ok")
    status: dict[str, object] = {"state": "finished", "created": T0, "started": T0 + 1, "ended": T0 + 60}
    if live:
        me = psutil.Process()
        now = time.time()
        status = {"state": "running", "created": now - 5, "started": now - 4, "pid": me.pid}
        status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
    return record_run(
        home,
        SEARCHED,
        RunSpec("ddp", nproc=2, cwd="/tmp"),
        status,
        steps=20,
        logs={0: "\n".join(lines) + "\n", 1: "rank one says [red]hello[/red]\n", "launcher.log": "torchrun up\n"},
    )


def record_finished(home: Path, run_id: str, logs: dict[int | str, str] | None = None) -> Path:
    """A finished one-rank run (its rank 0 log ``logs[0]``, or empty for the test to write)."""
    return record_run(
        home,
        run_id,
        RunSpec("ddp", nproc=1, cwd="/tmp"),
        {"state": "finished", "created": T0, "started": T0 + 1, "ended": T0 + 9},
        ranks=1,
        steps=5,
        logs=logs,
    )


def status_line(app: GpumonApp) -> str:
    return str(app.screen.query_one("#log-status").render())


def head(app: GpumonApp) -> str:
    return str(app.screen.query_one("#log-head").render())


async def open_log(pilot: Pilot[None], rows: int, run_id: str = SEARCHED) -> LogScreen:
    await open_runs(pilot, rows)
    await select(pilot, run_id)
    await pilot.press("o")
    await pilot_until(pilot, lambda: isinstance(pilot.app.screen, LogScreen))
    screen = pilot.app.screen
    assert isinstance(screen, LogScreen)
    await pilot_until(pilot, lambda: len(screen.query_one(LogPane).page.lines) > 0)
    return screen


async def search(pilot: Pilot[None], text: str) -> None:
    await pilot.press("slash")
    await pilot.press(*text)
    await pilot.press("enter")


async def test_search_finds_the_matches_and_n_N_move_between_them(home: Path) -> None:
    record_searchable(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_log(pilot, 1)
        await pilot_until(pilot, lambda: "step 299 ok" in screen_text(app))  # it opens at the end
        await search(pilot, "checkpoint")
        await pilot_until(pilot, lambda: "match 6 of 6 lines" in status_line(app))  # the newest, nearest the view
        assert "[rank0] step 257 saved checkpoint [bold]ckpt-257[/bold]" in screen_text(app)  # literal, not markup
        await pilot.press("N")
        await pilot_until(pilot, lambda: "match 5 of 6" in status_line(app))
        assert "ckpt-207" in screen_text(app)
        await pilot.press("N", "N", "N", "N")
        await pilot_until(pilot, lambda: "match 1 of 6" in status_line(app))
        assert "[rank0] step 7 saved checkpoint" in screen_text(app)
        await pilot.press("N")  # past the first: wraps to the last, and says so
        await pilot_until(pilot, lambda: "match 6 of 6" in status_line(app))
        assert any("wrapped" in n for n in notes(app))
        await pilot.press("n")
        await pilot_until(pilot, lambda: "match 1 of 6" in status_line(app))
        pane = screen.query_one(LogPane)
        highlighted = [
            span
            for line in pane.render().split("\n")
            for span in line.spans
            if "yellow" in str(span.style) or "green" in str(span.style)
        ]
        assert highlighted, "the matches are highlighted"
        await search(pilot, "CHECKPOINT")  # a capital: exact case
        await pilot_until(pilot, lambda: "no match" in status_line(app))
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, LogScreen))


def count_polls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The log screen's follow polls, counted: a test that checks a read does NOT happen waits for polls that
    would have made it (a fixed pause beside CPU hogs may pass before any poll ran)."""
    polls: list[str] = []
    counting(monkeypatch, LogScreen, "_poll", polls, "polled")
    return polls


async def test_follow_shows_appended_lines_and_scrolling_up_stops_it(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls = count_polls(monkeypatch)
    run_dir = record_searchable(home, live=True)
    log = run_dir / "logs" / "rank0.log"
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_log(pilot, 1)
        assert "following" in head(app)
        with log.open("a") as fh:
            fh.write("appended [while] following\n")
        await pilot_until(pilot, lambda: "appended [while] following" in screen_text(app))
        await pilot.press("up")  # as less +F: looking back stops following
        await pilot_until(pilot, lambda: "follow off" in head(app))
        with log.open("a") as fh:
            fh.write("written while not following\n")
        pane = screen.query_one(LogPane)
        polled = len(polls)  # two follow polls pass, and any read they began ends
        await pilot_until(
            pilot, lambda: len(polls) >= polled + 2 and all(w.is_finished for w in app.workers), "no poll"
        )
        assert not any("written while not following" in line for line in pane.page.lines)
        await pilot.press("f")
        await pilot_until(pilot, lambda: "written while not following" in screen_text(app))
        assert "following" in head(app) and "follow off" not in head(app)
        await pilot.press("q")  # as in less: q leaves the log, not the app
        await pilot_until(pilot, lambda: not isinstance(app.screen, LogScreen))
        assert app.is_running


async def test_l_and_L_switch_ranks_and_the_launcher_log(home: Path) -> None:
    record_searchable(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_log(pilot, 1)
        await pilot.press("l")
        await pilot_until(pilot, lambda: "rank one says [red]hello[/red]" in screen_text(app))  # literal brackets
        await pilot.press("l")
        await pilot_until(pilot, lambda: "torchrun up" in screen_text(app))
        assert "launcher" in head(app)
        await pilot.press("L", "L")
        await pilot_until(pilot, lambda: "step 299 ok" in screen_text(app))


async def test_a_200_MB_log_opens_at_its_end_reading_a_bounded_amount(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls = count_polls(monkeypatch)
    run_dir = record_finished(home, FINISHED)
    big = run_dir / "logs" / "rank0.log"
    with big.open("wb") as fh:  # 200 MB of lines, written sparse: the middle reads as zeros
        fh.write(b"the first line\n" * 1000)
        fh.truncate(200 * 1024 * 1024)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n" + b"".join(b"tail line %d\n" % i for i in range(100)))
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        before = psutil.Process().io_counters().read_chars
        screen = await open_log(pilot, 1, FINISHED)
        await pilot_until(pilot, lambda: "tail line 99" in screen_text(app))
        polled = len(polls)  # what it reads after the tail shows counts too: a follow poll passes and its read ends
        await pilot_until(
            pilot, lambda: len(polls) >= polled + 1 and all(w.is_finished for w in app.workers), "no poll"
        )
        read = psutil.Process().io_counters().read_chars - before
        assert screen.window is not None and screen.window.bytes_read <= 2 * 1024 * 1024
        assert read < 32 * 1024 * 1024, f"read {read:,} bytes to open a 200 MB log"
        assert "END of 200.0 MiB" in status_line(app)  # where the view is in the file, as less says it
        read = screen.window.bytes_read
        await pilot.press("w")  # wrapping lays out the lines held: it reads nothing
        await pilot_until(pilot, lambda: screen.query_one(LogPane).wrap and "tail line 99" in screen_text(app))
        assert screen.window.bytes_read == read and "END of 200.0 MiB" in status_line(app)
        await pilot.press("home")  # the start: one bounded read there, not the file
        await pilot_until(pilot, lambda: "the first line" in screen_text(app))
        await pilot_until(pilot, lambda: "0% of 200.0 MiB" in status_line(app))
        assert screen.window.bytes_read <= 4 * 1024 * 1024


async def test_space_marks_runs_and_c_overlays_their_loss_curves(home: Path) -> None:
    record_runs(home, live=False)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_runs(pilot, 3)
        await select(pilot, FINISHED)
        await pilot.press("space", "c")
        await pilot_until(pilot, lambda: any("Mark two or more runs" in n for n in notes(app)))
        assert not isinstance(app.screen, CompareScreen)
        assert str(table.get_cell(FINISHED, "id").text).startswith("● ")

        def marked(run_id: str) -> bool:
            return str(table.get_cell(run_id, "id").text).startswith("● ")

        await select(pilot, STOPPED)
        await pilot.press("space")
        # space is handled after press returns under load: unwaited, it could mark the run selected next
        await pilot_until(pilot, lambda: marked(STOPPED), "space never marked the stopped run", 30)
        await select(pilot, FAILED)
        await pilot.press("space")  # marked, then unmarked
        await pilot_until(pilot, lambda: marked(FAILED), "space never marked the failed run", 30)
        await pilot.press("space")
        await pilot_until(pilot, lambda: not marked(FAILED), "space never unmarked the failed run", 30)
        await pilot.press("c")
        await pilot_until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        chart = screen.query_one("#compare-chart", Chart)
        await pilot_until(pilot, lambda: len(chart.series) == 2)
        assert chart.series[0].style != chart.series[1].style  # one colour each
        text = screen_text(app)
        assert FINISHED in text and STOPPED in text and FAILED not in text  # the legend and the table
        assert "FINAL LOSS" in text and "BEST LOSS" in text and "0.132" in text and "3m05s" in text
        assert "step 200" in chart.render().plain
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, CompareScreen))
        assert isinstance(app.query_one(RunsView).query_one(RunTable), RunTable)


async def test_y_puts_the_loss_chart_on_a_log_axis(home: Path) -> None:
    record_runs(home, live=False)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, 3)
        await select(pilot, FINISHED)
        loss = app.query_one("#loss-chart", Chart)
        await pilot_until(pilot, lambda: len(loss.series) == 1)
        linear = loss.render().plain.splitlines()
        await pilot.press("y")
        await pilot_until(pilot, lambda: "log y" in str(loss.border_title))
        logged = loss.render().plain.splitlines()
        assert logged[-1].lstrip().startswith("log")  # the axis says which
        labels = [line.split("┤")[0].strip() for line in logged if "┤" in line]
        assert len(labels) == 3 and labels[0] == "2.31" and labels[-1] == "0.132"  # a middle label: decades
        mid = float(labels[1])
        assert math.isclose(mid, math.sqrt(2.3120 * 0.1321), rel_tol=0.2)  # geometric, not arithmetic
        assert linear != logged
        await pilot.press("y")
        await pilot_until(pilot, lambda: str(loss.border_title) == "loss / step")
        assert loss.render().plain.splitlines() == linear


def test_a_log_axis_skips_values_that_are_not_positive() -> None:
    from gpumon.tui.widgets.charts import Series, line_chart, nonpositive
    from gpumon.tui.widgets.render import number

    series = [Series((1, 2, 3, 4), (4.2, 0.0, -1.0, 0.02))]
    assert nonpositive(series) == 2
    lines = [line.plain for line in line_chart(series, 40, 8, number, log=True)]
    assert lines[0].startswith("4.2000") and lines[-2].startswith("0.0200") and "log" in lines[-1]
    empty = [line.plain for line in line_chart([Series((1,), (-3.0,))], 60, 5, number, log=True)]
    assert any("no value above 0" in line for line in empty)


async def test_another_hosts_log_shows_its_streamed_lines_and_searches_only_those(home: Path) -> None:
    streamed = [f"remote step {i}" for i in range(150)] + ["remote [error] at step 150"]
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(LogScreen(StreamedLog("ddp-1121-120000-r3r3", "gpu2", lambda: tuple(streamed))))
        await pilot_until(pilot, lambda: "remote [error] at step 150" in screen_text(app))
        assert "through ssh from gpu2" in head(app) and "search covers them" in head(app)
        assert "151 lines streamed" in status_line(app)
        streamed.append("remote step 151 [error] again")
        await pilot_until(pilot, lambda: "remote step 151 [error] again" in screen_text(app))  # followed
        await search(pilot, "[error]")
        await pilot_until(pilot, lambda: "match 2 of 2 lines" in status_line(app))
        await pilot.press("N")
        await pilot_until(pilot, lambda: "match 1 of 2" in status_line(app))
        await pilot.press("l")
        await pilot_until(pilot, lambda: any("--host gpu2 --rank N" in n for n in notes(app)))


async def test_paging_up_through_chunks_keeps_the_lines_in_order(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpumon.tui.views.runs.log_screen.KEEP_LINES", 200)  # the window slides every few pages
    run_dir = record_finished(home, FINISHED)
    (run_dir / "logs" / "rank0.log").write_text("".join(f"{i}\n" for i in range(120_000)))  # chunks of ~37k lines
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_log(pilot, 1, FINISHED)
        pane = screen.query_one(LogPane)

        def shown() -> list[int]:
            return [int(line) for line in pane.page.lines[pane.top : pane.top + pane.rows]]

        await pilot_until(pilot, lambda: shown() and shown()[-1] == 119_999)
        step = pane.rows - 1
        for presses in range(1, 30):  # past the 200 lines held at first: older reads come, newer lines go
            await pilot.press("pageup")
            await pilot_until(pilot, lambda: not screen._busy)
            lines = shown()
            assert lines == list(range(lines[0], lines[0] + pane.rows)), "consecutive"
            assert lines[-1] == 119_999 - presses * step
        assert screen.window is not None and screen.window.bytes_read < 2 * 1024 * 1024
        for presses in range(28, -1, -1):  # and back down: newer reads come, the older lines go
            await pilot.press("pagedown")
            await pilot_until(pilot, lambda: not screen._busy)
            lines = shown()
            assert lines == list(range(lines[0], lines[0] + pane.rows)), "consecutive"
            assert lines[-1] == 119_999 - presses * step
        assert pane.pinned  # at the end again
