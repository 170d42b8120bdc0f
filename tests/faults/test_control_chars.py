"""A run's name, arguments and output are not ours: an escape in them (clear the screen, set the title) or
a newline never reaches the terminal raw. `launch`, `runs` and `logs` show them as `less` does (^[ ^G ^J),
keep the script's colours (SGR) only on a terminal, and the app's Runs view keeps the run on one row.
Real runs, real CLI processes; the terminal is a real pty."""

from __future__ import annotations

import json
import os
import pty
import select as io_select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.color import Color
from rich.style import Style
from textual.widgets.data_table import RowKey

from gpumon.tui.views.runs.log_pane import LogPane
from gpumon.tui.views.runs.log_screen import LogScreen
from tests.conftest import make_app, pilot_until, wait_ended
from tests.test_runs_view import open_runs, screen_text, select

NAME = "evil\x1b[2J\x1b]0;pwned\x07\nname"
NAME_SHOWN = "evil^[[2J^[]0;pwned^G^Jname"
ARG = "a\x1b[2J\nb"
ARG_SHOWN = "a^[[2J^Jb"
RAW = ("\x1b", "\x07")  # what must never reach a terminal from a run's words

SCRIPT = r"""
import sys
print("\x1b]0;pwned\x07\x1b[2Jhello \x1b[31mred\x1b[0m\tend", flush=True)
print("argument", len(sys.argv[1]), flush=True)
"""
LINE_PIPE = "^[]0;pwned^G^[[2Jhello red\tend"  # into a pipe: colours dropped, every other escape shown
LINE_TTY = "^[]0;pwned^G^[[2Jhello \x1b[31mred\x1b[0m\tend"  # on a terminal: colours kept, the rest shown


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}


def run_gpumon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], env=env(tmp_path), capture_output=True, text=True, cwd=tmp_path
    )


def on_a_tty(tmp_path: Path, *args: str) -> str:
    """What `gpumon ARGS` writes to a real terminal (a pty)."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpumon", *args], env=env(tmp_path), cwd=tmp_path, stdout=child, stderr=child
    )
    os.close(child)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = io_select.select([main], [], [], 0.5)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            out += data
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(main)
    return out.decode().replace("\r\n", "\n")


@pytest.fixture
def run(tmp_path: Path) -> tuple[str, subprocess.CompletedProcess[str]]:
    (tmp_path / "escapes.py").write_text(SCRIPT)
    done = run_gpumon(tmp_path, "launch", "script", "escapes.py", "--name", NAME, "--", ARG)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    wait_ended(tmp_path / "home", run_id, timeout=60)
    assert "finished" in run_gpumon(tmp_path, "runs", run_id).stdout
    return run_id, done


def test_launch_and_runs_show_a_runs_name_and_arguments_as_text(
    tmp_path: Path, run: tuple[str, subprocess.CompletedProcess[str]]
) -> None:
    run_id, launched = run
    assert not any(c in launched.stdout for c in RAW), repr(launched.stdout)
    command = next(line for line in launched.stdout.splitlines() if line.startswith("command: "))
    assert command.endswith(f"escapes.py '{ARG_SHOWN}'"), command  # one line: the newline is ^J
    listed = run_gpumon(tmp_path, "runs")
    assert listed.returncode == 0 and not any(c in listed.stdout for c in RAW), repr(listed.stdout)
    lines = listed.stdout.splitlines()
    assert len(lines) == 2 and lines[1].startswith(run_id) and lines[1].endswith(NAME_SHOWN), lines
    doc = json.loads(run_gpumon(tmp_path, "runs", "--json").stdout)  # JSON escapes them itself: the name as given
    assert doc["runs"][0]["program"] == NAME
    on_tty = on_a_tty(tmp_path, "runs")
    assert not any(c in on_tty for c in RAW) and NAME_SHOWN in on_tty, repr(on_tty)


@pytest.mark.parametrize("follow", [False, True])
def test_logs_show_a_scripts_escapes_and_keep_its_colours_only_on_a_terminal(
    tmp_path: Path, run: tuple[str, subprocess.CompletedProcess[str]], follow: bool
) -> None:
    run_id, _ = run
    args = ("logs", run_id, *(["--follow"] if follow else []))
    piped = run_gpumon(tmp_path, *args)
    assert piped.returncode == 0, piped.stderr
    assert not any(c in piped.stdout for c in RAW), repr(piped.stdout)
    assert piped.stdout.splitlines()[:2] == [LINE_PIPE, f"argument {len(ARG)}"], repr(piped.stdout)
    on_tty = on_a_tty(tmp_path, *args)
    assert on_tty.splitlines()[:2] == [LINE_TTY, f"argument {len(ARG)}"], repr(on_tty)
    assert "\x07" not in on_tty and on_tty.count("\x1b") == 2, repr(on_tty)  # the two colour sequences only


async def test_the_runs_view_keeps_such_a_run_on_one_row_and_its_log_shown(
    tmp_path: Path, run: tuple[str, subprocess.CompletedProcess[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = run
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 40)) as pilot:
        table = await open_runs(pilot, 1)
        program = table.get_cell(run_id, "program").text
        assert program.plain == NAME_SHOWN, repr(program.plain)
        assert table.rows[RowKey(run_id)].height == 1
        await select(pilot, run_id)
        await pilot_until(pilot, lambda: "hello red" in screen_text(app))  # the detail's log tail
        text = screen_text(app)
        assert not any(c in text for c in RAW), repr(text)
        assert NAME_SHOWN in text and "^[]0;pwned^G^[[2Jhello red" in text, text
        await pilot.press("o")  # the log full screen
        await pilot_until(pilot, lambda: isinstance(app.screen, LogScreen))
        pane = app.screen.query_one(LogPane)
        await pilot_until(pilot, lambda: len(pane.page.lines) > 0)
        shown = pane.render()
        # the tab stops at column 32 of what is drawn (a colour code takes no column)
        assert shown.plain.splitlines()[0] == "^[]0;pwned^G^[[2Jhello red      end", repr(shown.plain)
        ansi_red = Color.parse("color(1)")
        red = [span for span in shown.spans if isinstance(span.style, Style) and span.style.color == ansi_red]
        assert red and shown.plain[red[0].start : red[0].end] == "red", shown.spans  # the colour kept, as colour
