"""The full-screen log at 80 columns: a long line's rest is reached by scrolling sideways (→ ←, as ``less -S``)
or by wrapping (``w``), and the position line reads as less's prompt (END at the end, 0% at the top).

Driven through Pilot on real log files; the screen's text is read from its SVG export, as a person sees it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpumon.tui.app import GpumonApp
from gpumon.tui.views.runs.log_pane import LogPane
from gpumon.tui.views.runs.log_screen import LogScreen
from tests.conftest import make_app, pilot_until
from tests.test_runs_logs import open_log, record_finished, status_line
from tests.test_runs_view import screen_text

RUN = "ddp-1121-110000-10ng"
# 250 columns: the path's tail and the line's end are far past an 80-column screen's 78
LONG = (
    "checkpoint ~/.local/state/gpumon/runs/ddp-1121-110000-10ng/checkpoints/"
    + "/".join(f"part{i:02d}" for i in range(20))
    + "/[bold]ckpt-0020[/bold].pt \x1b]0;title\x07 saved in 1.2 s END-OF-THE-LONG-LINE"
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    lines = [f"step {i} ok" for i in range(60)]
    lines[30] = LONG
    record_finished(tmp_path, RUN, logs={0: "\n".join(lines) + "\n"})
    return tmp_path


def shown_lines(app: GpumonApp) -> list[str]:
    return screen_text(app).splitlines()


def showing(app: GpumonApp, start: str = "", end: str = "") -> bool:
    """A line on screen starts with ``start`` and ends with ``end``."""
    return any(line.startswith(start) and line.rstrip().endswith(end) for line in shown_lines(app))


async def the_long_line_shown(pilot: Pilot[None]) -> LogScreen:
    """The log open at 80x24, scrolled so that its long line shows."""
    screen = await open_log(pilot, 1, RUN)
    await pilot.press("home", *["down"] * 20)
    await pilot_until(pilot, lambda: showing(pilot.app, "checkpoint ~/"))
    return screen


async def test_right_arrow_scrolls_chopped_lines_half_a_screen_and_ctrl_right_reaches_the_end(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await the_long_line_shown(pilot)
        assert not any("END-OF-THE-LONG-LINE" in line for line in shown_lines(app))  # chopped, as before
        await pilot.press("right")
        # half the 78 columns further: the line from its 40th column, the short lines gone past their end
        await pilot_until(pilot, lambda: showing(app, LONG[39:70]), "→ did nothing")
        assert "column 40" in status_line(app)
        await pilot.press("right", "right", "right", "right", "right")
        # as far as the longest line goes: its end at the right edge, never past it into blank columns
        await pilot_until(pilot, lambda: showing(app, end="saved in 1.2 s END-OF-THE-LONG-LINE"))
        assert any("[bold]ckpt-0020[/bold].pt ^[]0;title^G saved" in line for line in shown_lines(app))  # literal
        await pilot.press("ctrl+left")  # the lines' start, as less's ESC-{
        await pilot_until(pilot, lambda: showing(app, "checkpoint ~/"))
        await pilot.press("ctrl+right")  # the longest line's end, as less's ESC-}
        await pilot_until(pilot, lambda: showing(app, end="END-OF-THE-LONG-LINE"))
        await pilot.press(*["left"] * 7)
        await pilot_until(pilot, lambda: showing(app, "checkpoint ~/"))
        assert "column" not in status_line(app)


async def test_w_wraps_long_lines_showing_their_tail_and_chops_them_again(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await the_long_line_shown(pilot)
        assert "w wrap" in shown_lines(app)[-1]  # the key is offered in the footer
        await pilot.press("w")
        await pilot_until(pilot, lambda: showing(app, end="END-OF-THE-LONG-LINE"), "w did not wrap")
        lines = shown_lines(app)
        first = next(i for i, line in enumerate(lines) if line.startswith("checkpoint ~/"))
        rows = lines[first : lines.index("step 31 ok", first)]
        # every character of the line, in order, on rows of the width: markup and escapes shown, not obeyed
        shown = LONG.replace("\x1b", "^[").replace("\x07", "^G")
        assert len(rows) == 4 and "".join(rows).replace(" ", "") == shown.replace(" ", ""), rows
        await pilot.press("end")  # wrapped, the end is the last rows: END, and the last line at the bottom
        await pilot_until(pilot, lambda: "END of" in status_line(app) and "step 59 ok" in shown_lines(app)[-3])
        assert screen.query_one(LogPane).pinned
        await pilot.press("w", "home", *["down"] * 20)
        await pilot_until(pilot, lambda: showing(app, "checkpoint ~/"))
        assert not any("END-OF-THE-LONG-LINE" in line for line in shown_lines(app))  # chopped again


async def test_the_position_reads_END_at_the_end_and_0_percent_after_home(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_log(pilot, 1, RUN)
        await pilot_until(pilot, lambda: "step 59 ok" in screen_text(app))  # a finished log opens at its end
        await pilot_until(pilot, lambda: status_line(app).startswith("END of "), "not END at the end")
        await pilot.press("home")
        await pilot_until(pilot, lambda: "step 0 ok" in screen_text(app))
        await pilot_until(pilot, lambda: status_line(app).startswith("0% of "), "not 0% after home")
        await pilot.press("pagedown")
        await pilot_until(pilot, lambda: not status_line(app).startswith(("0%", "END")))
        await pilot.press("G")
        await pilot_until(pilot, lambda: status_line(app).startswith("END of "), "not END after G")
