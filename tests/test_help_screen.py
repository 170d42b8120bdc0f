"""The help screen: every key of every view reachable at 80x24, keys read as typed, F1 and F10 as in htop."""

from __future__ import annotations

import re
import string

import pytest
from rich.console import Console, Group
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.geometry import Region
from textual.keys import _character_to_key
from textual.widgets import Static

from gpumon.tui.app import GpumonApp
from gpumon.tui.app_keys import FOOTNOTE, help_sections
from gpumon.tui.keys import help_renderable, help_rows, key_label
from gpumon.tui.widgets.screens import ConfirmScreen, HelpScreen
from tests.conftest import make_app, pilot_until
from tests.test_app import screen_text


def words(text: str) -> str:
    return " ".join(text.split())


def help_lines(app: GpumonApp) -> list[str]:
    """Every line of the help as laid out at this width, scrolled into view or not (spaces squeezed)."""
    text = app.screen.query_one("#help-text", Static)
    return [words(strip.text) for strip in text.render_lines(Region(0, 0, *text.size))]


def shown(app: GpumonApp) -> str:
    return words(screen_text(app))


def test_keys_read_as_typed() -> None:
    assert key_label("slash") == "/"
    assert key_label("less_than_sign,greater_than_sign") == "< >"
    assert key_label("full_stop") == "."
    assert key_label("question_mark,f1") == "? F1"
    assert key_label("ctrl+slash") == "ctrl+/"
    assert key_label("space") == "space" and key_label("escape") == "esc" and key_label("enter") == "enter"
    assert key_label("R") == "R (shift+r)"
    for char in string.punctuation:  # whatever key a view binds next, by Textual's name for it
        assert key_label(_character_to_key(char)) == char, char


def test_no_key_in_the_help_reads_as_a_textual_key_name() -> None:
    for _title, _note, rows in help_rows(help_sections(), {}):
        for keys, _what in rows:
            assert not re.search(r"[a-z]+_[a-z]+|\bslash\b", keys), keys


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_every_line_of_the_help_can_be_scrolled_into_view(size: tuple[int, int]) -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=size) as pilot:
        await pilot.press("r", "question_mark")  # the Runs view's charts behind it
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        lines = [line for line in help_lines(app) if line]
        assert lines[0] == "gpumon keys" and lines[-1].endswith("Keys).")  # the footnote's end
        seen = set()
        for _ in range(len(lines)):  # page by page, the whole text passes
            text = shown(app)
            seen |= {line for line in lines if line in text}
            if lines[-1] in text:
                break
            await pilot.press("pagedown")
        assert seen == set(lines), set(lines) - seen
        for title, _note, rows in help_rows(help_sections(), {}):  # each view's last key among them
            keys, what = rows[-1]
            assert any(line.startswith(keys) and what.split()[0] in line for line in seen), title
        await pilot.press("home")
        assert "gpumon keys" in shown(app) and lines[-1] not in shown(app)
        await pilot.press("end")
        assert lines[-1] in shown(app)
        assert "trainbox" not in shown(app) and "loss / step" not in shown(app)  # opaque: nothing of the view behind


async def test_f1_opens_the_help_and_f1_escape_q_and_question_mark_close_it() -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        for close in ("f1", "escape", "q", "question_mark"):
            await pilot.press("f1")
            await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen))
            await pilot.press(close)
            assert not isinstance(app.screen, HelpScreen), close
        assert app.is_running  # q closed the help, it did not quit


async def test_a_remapped_help_key_opens_and_closes_it() -> None:
    app = make_app(gpus=1, keymap={"help": "ctrl+h"})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+h")
        assert isinstance(app.screen, HelpScreen)
        assert "ctrl+h" in app.screen.text and "? F1" not in app.screen.text
        assert "esc q ctrl+h: close" in screen_text(app)
        await pilot.press("ctrl+h")
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.parametrize("keys", [("r", "f10"), ("f1", "f10")])
async def test_f10_quits_from_any_view_and_from_the_help(keys: tuple[str, ...]) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*keys)
        await pilot.pause()
        assert not app.is_running


def test_the_help_lists_f1_and_f10() -> None:
    rows = dict(help_rows(help_sections(), {})[0][2])
    assert rows["q F10"].startswith("quit") and rows["? F1"].startswith("every key")
    assert "[keymap]" in FOOTNOTE  # shown as written (it was read as markup and vanished)


async def test_the_stop_question_wraps_on_words_and_keeps_a_long_command_whole() -> None:
    command = (
        "python -m torch.distributed.run --nproc-per-node 8 "
        "/home/alice/projects/imagenet-2026/train_resnet50_ddp_amp.py "
        "--data /datasets/imagenet/train --epochs 90 --batch-size 256 --extras '.[train]' [b]"
    )
    question = f"Stop run script-1124-215501-ab12?\nSIGTERM to all its processes ({command}), SIGKILL after 10 s."
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(ConfirmScreen(question))
        await pilot.pause()
        text = screen_text(app)
        for word in question.split():  # each word whole on one line (the path: 60 characters), brackets and all
            assert word in text, word
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmScreen)


def grid_help(rows: list, footnote: str) -> Group:
    """The help as it was drawn before it was built of lines: a rich grid of two columns per section."""
    width = min(24, max([10, *(len(keys) for _, _, section in rows for keys, _ in section)]))
    parts: list[Text | Table] = [Text("gpumon keys", style="bold")]
    for title, note, section in rows:
        head = Text(title, style="bold")
        if note:
            head.append(f"  {note}", style="dim")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=width + 3)
        grid.add_column(ratio=1)
        for keys, what in section:
            grid.add_row(Text(f"  {keys}", style="bold"), Text(what))
        parts += [Text(), head, grid]
    return Group(*parts, Text(), Text(footnote, style="dim"))


@pytest.mark.parametrize("width", [34, 60, 78, 100, 160])
def test_the_help_reads_and_looks_as_its_grid_of_keys_did(width: int) -> None:
    """The help is built of plain lines (a grid per section was measured and drawn at each of its layouts: ~60 ms of
    CPU, in the way of a key typed while the help was laid out ahead): the same characters in the same styles, a long
    line wrapped on words under its own column, at any width the help shows at."""
    rows = help_rows(help_sections(), {"toggle_help": "f1"})
    console = Console(width=width, color_system="truecolor")
    lines = [
        console.render_lines(r, console.options, pad=True)
        for r in (grid_help(rows, FOOTNOTE), help_renderable(rows, FOOTNOTE))
    ]
    cells = [
        [[(ch, segment.style or Style()) for segment in line for ch in segment.text] for line in drawn]
        for drawn in lines
    ]
    assert cells[1] == cells[0]
    if width < 78:  # a long line wrapped under its own column: a line with no keys
        assert any(set("".join(ch for ch, _ in line[:12])) == {" "} and line[30][0] != " " for line in cells[1]), width
