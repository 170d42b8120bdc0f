"""The launch form is built once and kept: each opening (n, e) fills it anew, as a new form would be.

It is built ahead once the Runs view first shows, so the key that opens it only fills it and shows it, and
the line under the program (which looks at files) is read in a thread, never on a key's path.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual import events
from textual.widgets import Input, Select, Static

from gpumon.core.runs.record.spec import RunSpec
from gpumon.tui.app_ahead import HELP
from gpumon.tui.views.runs.form_spec import FormValues, values_from_spec
from gpumon.tui.views.runs.launch_form import LaunchForm
from gpumon.tui.views.runs.launching import FORM
from tests.conftest import make_app, open_launch_form, pilot_until
from tests.test_launch_form import hint, runs
from tests.test_runs_view import FINISHED, notes, open_runs, record_runs, select


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU to launch on, on any machine
    monkeypatch.chdir(tmp_path)
    return tmp_path / "state"


def error(form: LaunchForm) -> str:
    """The form's error line; "" while the form opened by a burst is still composing (no line yet)."""
    boxes = form.query("#form-error").results(Static)
    box = next(boxes, None)
    return str(box.render()) if box is not None and box.display else ""


DEFAULTS = FormValues(kind="ddp", nproc="2")


def title(form: object) -> str:
    """The launch form's title: what the key that opened it asked for (a new run, a clone)."""
    assert isinstance(form, LaunchForm)
    return str(form.query_one("#launch-form").border_title)


async def test_n_again_shows_the_same_form_filled_anew(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)  # ddp's processes on a CPU: 2
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)) as pilot:
        form = await open_launch_form(pilot)
        assert form.values() == DEFAULTS
        await pilot.press("tab", "tab", *"nope.py", "tab", *"--lr 1", "enter")
        await pilot_until(pilot, lambda: "program not found: nope.py" in error(form))
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, LaunchForm))
        assert form.focused is None  # closed, no field of the kept form holds the focus
        await pilot.press("n")
        # a key is handled after press returns under load (typeahead.py holds it behind the ones before)
        await pilot_until(pilot, lambda: isinstance(app.screen, LaunchForm), "n never opened the form", 30)
        assert app.screen is form  # the same form, not composed again
        assert form.values() == DEFAULTS and error(form) == ""
        await pilot_until(pilot, lambda: form.focused is form.query_one("#kind", Select))
        assert str(form.query_one("#launch-form").border_title) == "New run"
        await pilot_until(pilot, lambda: hint(form) == "blank: the kind's own trainer, python -m trainers.ddp (digits)")
    assert runs(home) == []


async def test_e_then_n_fill_the_kept_form_as_a_clone_then_as_a_new_run(home: Path) -> None:
    record_runs(home, live=False)
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_runs(pilot, 3)
        await select(pilot, FINISHED)
        await pilot.press("n", "tab", "tab", *"first.py", "escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, LaunchForm))
        await pilot.press("e")
        # n's form may still be open as press returns (escape and e held behind it): wait for e's own form
        cloned = f"Clone of {FINISHED}"
        await pilot_until(pilot, lambda: isinstance(app.screen, LaunchForm) and title(app.screen) == cloned, "no clone")
        form = app.screen
        assert isinstance(form, LaunchForm)
        assert form.values() == values_from_spec(RunSpec("ddp", nproc=2, cwd="/tmp"))
        assert form.cwd == "/tmp"  # paths resolve from where the cloned run started
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, LaunchForm))
        await pilot.press("n")
        await pilot_until(pilot, lambda: isinstance(app.screen, LaunchForm), "n never opened the form", 30)
        assert app.screen is form
        assert title(form) == "New run"
        assert form.values().program == "" and form.values().name == "" and form.cwd != "/tmp"


@pytest.mark.parametrize("readonly", [False, True])
async def test_the_form_is_built_shortly_after_the_start_and_not_with_readonly(home: Path, readonly: bool) -> None:
    app = make_app(gpus=1, readonly=readonly)
    async with app.run_test(size=(100, 30)) as pilot:
        if readonly:
            await pilot_until(pilot, lambda: app.is_screen_installed(HELP))  # built with it, if at all
            # the form is absent: wait instead until the start's building ahead has ended (it builds the form then)
            await pilot_until(pilot, lambda: not app.drawing_unseen(), "the building ahead never ended")
            assert not app.is_screen_installed(FORM)
            return
        await pilot_until(pilot, lambda: app.is_screen_installed(FORM))
        built = app.get_screen(FORM)
        await pilot_until(pilot, lambda: built.is_mounted)
        assert app.screen is not built  # built behind the GPUs view, not shown
        await pilot.press("r", "n")
        await pilot_until(pilot, lambda: app.screen is built)


async def test_the_program_hint_looks_at_files_in_a_thread(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumon.tui.views.runs import launch_form

    on_main: list[tuple[str, bool]] = []
    real = launch_form.program_hint

    def spy(kind: str, text: str, cwd: str) -> object:
        on_main.append((text, threading.current_thread() is threading.main_thread()))
        return real(kind, text, cwd)

    monkeypatch.setattr(launch_form, "program_hint", spy)
    (home.parent / "there.py").write_text("print(1)\n")
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r", "n", "tab", "tab", *"there.py")
        form = app.screen
        assert isinstance(form, LaunchForm)
        await pilot_until(pilot, lambda: hint(form) == f"→ {home.parent / 'there.py'} exists")
        await pilot.press(*["backspace"] * 8, *"-m pkg")
        await pilot_until(pilot, lambda: hint(form).startswith("module pkg"))
    paths = [main for text, main in on_main if text.strip() and not text.startswith("-m ")]
    assert paths and not any(paths), on_main  # every path was looked at off the main thread
    assert ("-m pkg", True) in on_main  # a module's line reads no file: drawn at once


def burst(app: object, keys: list[str]) -> None:
    """Keys read in one go, as from one write to the terminal (Pilot's press waits between keys)."""
    for key in keys:
        char = key if len(key) == 1 else None
        app.post_message(events.Key(key, char))  # type: ignore[attr-defined]


async def test_a_burst_that_opens_the_form_types_into_it_in_order(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.3)
        burst(app, ["r", "n", "tab", "tab", *"trian.py", "tab", *"--lr.1", "enter"])
        await pilot_until(pilot, lambda: isinstance(app.screen, LaunchForm) and "trian.py" in error(app.screen))
        form = app.screen
        assert isinstance(form, LaunchForm)
        assert form.query_one("#script", Input).value == "trian.py"
        assert form.query_one("#args", Input).value == "--lr.1"
        assert error(form) == "program not found: trian.py (a module? pass -m NAME)"
    assert runs(home) == []


async def test_keys_past_what_is_held_are_dropped_with_a_note(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpumon.tui.typeahead.HELD_MAX", 4)
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r")
        # `r` shown and gone its way (none in flight): the burst's n is then the one in flight, the next 4 held
        await pilot_until(pilot, lambda: app.view == "runs" and app._in_flight is None, "r never took effect")
        burst(app, ["n", "tab", "tab", *"abcdefgh"])  # n in flight, then 4 held: tab tab a b
        await pilot_until(pilot, lambda: "6 keys dropped: gpumon was busy" in notes(app))
        form = app.screen
        assert isinstance(form, LaunchForm)
        await pilot_until(pilot, lambda: form.query_one("#script", Input).value == "ab")


async def test_a_select_whose_label_is_not_composed_yet_shows_its_value_once_it_is(home: Path) -> None:
    """At load 20 the form built ahead set a Select's value before its SelectCurrent had composed the label:
    the app died of NoMatches '#label'. Now the value shows when the label comes."""
    from textual.widgets._select import SelectCurrent

    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)) as pilot:
        form = await open_launch_form(pilot)
        kind = form.query_one("#kind", Select)
        current = kind.query_one(SelectCurrent)
        await current.query_one("#label", Static).remove()  # as before SelectCurrent composed it
        kind.value = "script"  # raised NoMatches before
        await pilot.pause()
        await current.mount(Static("", id="label"))
        await pilot_until(pilot, lambda: str(current.query_one("#label", Static).render()) == "script")
        assert kind.value == "script"
