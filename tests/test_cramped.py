"""Issue 35, "Cut and cramped": what a view shows at 80, 120 and 200 columns is whole, or says what it left out.

Each test reads the screen as the terminal shows it (the compositor's characters), not a widget's own text.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from rich.console import Console
from textual.pilot import Pilot

from gpumon.tui.app import GpumonApp
from tests.conftest import make_app, pilot_until

pytestmark = pytest.mark.usefixtures("utc")


def screen_lines(app: GpumonApp) -> list[str]:
    """The screen's characters, line by line, as a terminal of the app's size shows them."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()


def on_screen(app: GpumonApp, size: tuple[int, int], drive: Callable[[Pilot[None]], Awaitable[None]]) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await drive(pilot)

    asyncio.run(main())


async def settled(pilot: Pilot[None], what: Callable[[], object], timeout: float = 30) -> None:
    """Let the app run until the screen shows what the test then asserts (a fixed pause beside CPU hogs read the
    screen before the layout or the fit); a timeout is left to the assertion, which says what is wrong."""
    with contextlib.suppress(AssertionError, StopIteration, IndexError):
        await pilot_until(pilot, what, timeout=timeout)


# -- the top bar --------------------------------------------------------------------------------------------
def test_the_top_bar_at_80_columns_keeps_the_gpu_count_and_interval_beside_unread_alerts(views_home: Path) -> None:
    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        await pilot_until(pilot, lambda: "!" in screen_lines(app)[0], "the unread alerts never showed")
        top = screen_lines(app)[0]
        assert "2 GPUs · 1s" in top and "SIM" in top and "Alerts" in top, top

    on_screen(app, (80, 24), drive)


# -- the Runs view ------------------------------------------------------------------------------------------
async def runs_shown(pilot: Pilot[None], rows: int = 4) -> None:
    from gpumon.tui.views.runs.run_table import RunTable

    await pilot.press("r")
    table = pilot.app.query_one(RunTable)
    await pilot_until(pilot, lambda: table.row_count >= rows, "the runs never showed")
    # the rows drawn, not only held: the title on screen counts them
    await pilot_until(pilot, lambda: any(f"runs · {rows}" in line for line in screen_lines(pilot.app)), "no title")


@pytest.mark.parametrize("width", [80, 120])
def test_loss_column_holds_the_widest_loss_gpumon_writes(views_home: Path, width: int) -> None:
    from gpumon.core.events import EventWriter
    from tests.test_runs_view import FINISHED

    writer = EventWriter(views_home / "runs" / FINISHED, "rank0")  # the finished run's last loss: 9.99e-05
    writer.write("metrics", step=201, metrics={"loss": 9.99e-05})
    writer.close()
    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        await runs_shown(pilot)
        await settled(pilot, lambda: any("ddp-" in line and "9.99e-05" in line for line in screen_lines(app)))
        row = next(line for line in screen_lines(app) if "ddp-" in line and "finished" in line)
        assert "9.99e-05" in row, row

    on_screen(app, (width, 40), drive)


def test_the_hidden_columns_note_fits_the_runs_title_at_80_columns(views_home: Path) -> None:
    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        await runs_shown(pilot)
        await settled(pilot, lambda: any("runs · 4" in line and "hidden" in line for line in screen_lines(app)))
        title = next(line for line in screen_lines(app) if "runs · 4" in line)
        assert "hidden" in title and "…" not in title, title

    on_screen(app, (80, 24), drive)


# -- the Alerts view ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", [80, 120, 200])
def test_alerts_columns_fit_their_values_and_a_long_text_ends_in_an_ellipsis(views_home: Path, width: int) -> None:
    from tests.views_data import FAILED_TEXT

    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        await pilot.press("exclamation_mark")
        await pilot_until(pilot, lambda: any("failed: the script" in line for line in screen_lines(app)), "no alerts")
        lines = screen_lines(app)
        header = next(line for line in lines if "TIME" in line and "STATUS" in line)
        assert "TEXT" in header, header
        # STATUS as wide as "no channel" (the detail says why it went nowhere), not 30 columns
        assert header.index("TEXT") - header.index("STATUS") <= len("no channel") + 2, header
        row = next(line for line in lines if "failed: the script" in line)
        assert "no channel" in row, row
        shown = row.rstrip()
        assert shown.endswith("…") and len(shown) < width - 1, row  # cut with an ellipsis, inside the screen
        assert FAILED_TEXT.startswith(shown[shown.index("failed: the script") : -1]), row
        leak = next(line for line in lines if "leak: rank 1" in line)
        assert len(leak.rstrip()) < width - 1, leak

    on_screen(app, (width, 40), drive)


# -- the GPUs view without a GPU ----------------------------------------------------------------------------
def test_no_gpu_notice_names_the_readmes_demo_and_compact_mode_draws_one_box(views_home: Path) -> None:
    from tests.conftest import no_gpu_app

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    demo = next(line for line in readme.splitlines() if line.startswith("No GPU at hand?")).split("`")[1]
    app = no_gpu_app()

    async def drive(pilot: Pilot[None]) -> None:
        await pilot_until(pilot, lambda: any("No GPU shown" in line for line in screen_lines(app)), "no notice")
        assert demo in "".join(screen_lines(app)), (demo, screen_lines(app))
        await pilot.press("c")
        await settled(
            pilot, lambda: next(line for line in screen_lines(app) if "No GPU shown" in line).startswith("│ No GPU")
        )
        lines = screen_lines(app)
        notice = next(line for line in lines if "No GPU shown" in line)
        assert notice.startswith("│ No GPU shown"), "\n".join(lines)  # the list's border only, no box inside
        assert not any("││" in line or "│╭" in line for line in lines), "\n".join(lines)

    on_screen(app, (80, 24), drive)


# -- the GPUs view ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("gpus", "size", "whole"), [(4, (120, 40), 4), (2, (80, 24), 2), (3, (80, 24), 2)])
def test_gpu_panels_show_whole(gpus: int, size: tuple[int, int], whole: int) -> None:
    """Whole panels, as many as fit beside the process table; the list scrolls (3 at 80x24) by whole panels."""
    app = make_app(gpus=gpus)

    def bottoms_shown() -> int:
        return sum("SIMULATED ━┛" in line or "SIMULATED ─╯" in line for line in screen_lines(app))

    async def drive(pilot: Pilot[None]) -> None:
        await settled(pilot, lambda: bottoms_shown() == whole and not app.drawing_unseen())
        lines = screen_lines(app)
        bottoms = [line for line in lines if "SIMULATED ━┛" in line or "SIMULATED ─╯" in line]
        assert len(bottoms) == whole, "\n".join(lines)  # no panel cut at its border
        tops = [i for i, line in enumerate(lines) if "GPU" in line and ("╭─ GPU" in line or "┏━ GPU" in line)]
        last = lines[tops[-1] + 4]
        edge = -3 if gpus > whole else -1  # a scrolling list's scrollbar beside the panels; else none
        assert last[edge] in "╯┛", "\n".join(lines)  # the last panel's whole border

    on_screen(app, size, drive)


# -- the Doctor view ----------------------------------------------------------------------------------------
def test_doctor_text_wraps_under_its_label_not_at_column_0(views_home: Path) -> None:
    from tests.test_runs_view import FAILED

    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        from gpumon.tui.views.runs.run_table import RunTable
        from gpumon.tui.views.runs.view import RunsView

        await runs_shown(pilot)
        app.query_one(RunTable).select_run(FAILED)
        # `d` opens the selected run's doctor
        await pilot_until(pilot, lambda: app.query_one(RunsView).selected_id == FAILED, "never selected")
        await pilot.press("d")
        await pilot_until(pilot, lambda: any("rank 0: growing" in line for line in screen_lines(app)), "no doctor")
        lines = screen_lines(app)
        at = next(i for i, line in enumerate(lines) if "rank 0: growing" in line)
        label = lines[at].index("growing")
        assert lines[at + 1][:label].strip("│ ") == "" and lines[at + 1][label] != " ", "\n".join(lines)
        # a sentence of the failure's detail wraps under its own indent too
        detail = next(i for i, line in enumerate(lines) if "A kernel checked" in line)
        assert lines[detail + 1].startswith("│   ") and lines[detail + 1][4] != " ", "\n".join(lines)

    on_screen(app, (80, 24), drive)


# -- logs ---------------------------------------------------------------------------------------------------
def test_an_ended_ranks_empty_log_says_it_ended_with_no_output(views_home: Path) -> None:
    from tests.test_runs_view import FINISHED

    (views_home / "runs" / FINISHED / "logs" / "rank1.log").write_text("")  # rank 1 of the finished run wrote nothing
    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        from gpumon.tui.views.runs.run_table import RunTable

        await runs_shown(pilot)
        app.query_one(RunTable).select_run(FINISHED)
        await pilot_until(pilot, lambda: any("rank0 epoch 1" in line for line in screen_lines(app)), "rank 0's log")
        await pilot.press("l")  # rank 1
        await pilot_until(pilot, lambda: any("rank 1: " in line for line in screen_lines(app)), "rank 1's log")
        text = "\n".join(screen_lines(app))
        assert "rank 1: ended with no output" in text and "no output yet" not in text, text
        await pilot.press("o")  # the full-screen log, on rank 1
        await pilot_until(pilot, lambda: any("ended with no output" in line for line in screen_lines(app)), "full log")
        assert "no output yet" not in "\n".join(screen_lines(app))

    on_screen(app, (120, 40), drive)


def test_the_full_screen_log_says_all_of_it_is_shown(views_home: Path) -> None:
    from gpumon.core.format import size
    from tests.test_runs_view import FINISHED

    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        from gpumon.tui.views.runs.run_table import RunTable

        await runs_shown(pilot)
        app.query_one(RunTable).select_run(FINISHED)
        await pilot_until(pilot, lambda: any("rank0 epoch 1" in line for line in screen_lines(app)), "rank 0's log")
        await pilot.press("l", "o")  # rank 1's two lines, full screen
        await pilot_until(pilot, lambda: any("rank1 hello" in line for line in screen_lines(app)), "rank 1's log")
        await pilot_until(pilot, lambda: any(" B" in line for line in screen_lines(app)[-3:]), "the status line")
        status = screen_lines(app)[-2]
        whole = size((views_home / "runs" / FINISHED / "logs" / "rank1.log").stat().st_size)
        assert status.strip().startswith(f"all {whole}"), "\n".join(screen_lines(app))
        await pilot.press("L")  # rank 0: 59 lines, more than the screen holds
        await pilot_until(pilot, lambda: any("rank0 epoch" in line for line in screen_lines(app)), "rank 0's log")
        await pilot_until(pilot, lambda: "END of" in screen_lines(app)[-2], "rank 0's position: its end")

    on_screen(app, (120, 40), drive)


def test_a_ddp_run_whose_launcher_log_came_first_shows_rank_0_once_it_writes(views_home: Path) -> None:
    """torchrun writes launcher.log before any rank writes rank0.log: the pane falls back to the banner, and
    goes to rank 0's log as soon as there is one (the fallback is not taken for the user's pick)."""
    import psutil

    from gpumon.core.runs.record.spec import RunSpec
    from tests.test_runs_view import record_run

    run_id = "ddp-1121-110000-f00d"
    me = psutil.Process()
    status = {"state": "running", "created": time.time() - 5, "started": time.time() - 4, "pid": me.pid}
    status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
    run_dir = record_run(
        views_home,
        run_id,
        RunSpec("ddp", nproc=2, cwd="/tmp"),
        status,
        steps=3,
        logs={"launcher.log": "torchrun banner\n"},
    )
    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        from gpumon.tui.views.runs.run_table import RunTable

        await runs_shown(pilot, rows=5)
        app.query_one(RunTable).select_run(run_id)
        await pilot_until(pilot, lambda: any("torchrun banner" in line for line in screen_lines(app)), "the banner")
        (run_dir / "logs" / "rank0.log").write_text("rank 0 says hello\n")
        (run_dir / "logs" / "rank1.log").write_text("rank 1 says hello\n")
        await pilot_until(pilot, lambda: any("rank 0 says hello" in line for line in screen_lines(app)), "rank 0's log")
        await pilot.press("o")  # the full-screen log opens on rank 0 too
        await pilot_until(pilot, lambda: any("rank 0 says hello" in line for line in screen_lines(app)), "full screen")

    on_screen(app, (120, 40), drive)


# -- the Trials view ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_the_trial_table_hides_columns_it_names_rather_than_scroll_sideways(views_home: Path, size: tuple[int, int]):
    from gpumon.tui.views.trials.trial_table import TrialTable

    app = make_app(gpus=2)

    async def drive(pilot: Pilot[None]) -> None:
        await pilot.press("t")
        table = app.query_one(TrialTable)
        await pilot_until(pilot, lambda: table.row_count >= 6, "the trials never showed")
        await settled(  # the columns fitted to the width, drawn
            pilot,
            lambda: (
                table.virtual_size.width <= table.scrollable_content_region.width
                and next(line for line in screen_lines(app) if "TRIAL" in line and "STATUS" in line).rstrip()[-1] == "│"
                and (size[0] != 80 or any("hidden: acc" in line for line in screen_lines(app)))
            ),
        )
        assert table.virtual_size.width <= table.scrollable_content_region.width, "\n".join(screen_lines(app))
        header = next(line for line in screen_lines(app) if "TRIAL" in line and "STATUS" in line)
        assert header.rstrip()[-1] == "│", header
        if size[0] == 80:
            title = next(line for line in screen_lines(app) if "trials · 6" in line)
            assert "hidden: acc, GPU MEM, TIME, BEST" in title, title

    on_screen(app, size, drive)
