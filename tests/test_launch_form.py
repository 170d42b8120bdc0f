"""The launch form as a user meets it: labelled fields in tab order, Enter that never launches by surprise,
the resolved path before launch, every option the CLI has, and a finished run cloned, edited and launched."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from textual.widgets import Input, Select

from gpumon.core.runs.record.spec import RunSpec, SpecError
from gpumon.core.runs.record.store import RunStore
from gpumon.core.runs.supervision.launcher import launch, wait
from gpumon.tui.views.runs.form_spec import FormValues, build_spec, spec_values, values_from_spec
from gpumon.tui.views.runs.launch_form import LaunchForm
from gpumon.tui.views.runs.run_command import RunCommand
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.runs.view import RunsView
from tests.conftest import make_app, open_launch_form, pilot_until
from tests.test_runs_view import cell, notes, open_runs, row_keys, screen_text, select, tiny_script

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU to launch on, on any machine
    return tmp_path / "state"


def runs(home: Path) -> list[Path]:
    folder = home / "runs"
    return sorted(folder.iterdir()) if folder.exists() else []


def launched_spec(run_dir: Path) -> dict:
    return json.loads((run_dir / "spec.json").read_text())


def hint(form: LaunchForm) -> str:
    return str(form.query_one("#program-hint").render())


async def test_enter_on_the_kind_list_opens_it_and_launches_nothing(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        form = await open_launch_form(pilot)
        kind = form.query_one("#kind", Select)
        assert form.focused is kind
        await pilot.press("enter")
        assert kind.expanded and app.screen is form
        await pilot.press("down", "enter")  # picks the next kind in the open list
        assert kind.value == "dp" and not kind.expanded and app.screen is form
        assert "enter launches from a text field or Launch; on a list it opens the list" in screen_text(app)
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, LaunchForm))
    assert runs(home) == []


async def test_tab_goes_down_the_fields_that_show_and_the_launched_spec_has_what_was_typed(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_script(tmp_path, steps=3, sleep=0.01)
    monkeypatch.chdir(tmp_path)  # relative paths resolve from where gpumon started
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        form = await open_launch_form(pilot)
        await pilot.press("enter", "down", "down", "down", "down", "enter")  # the kind list: script
        assert form.query_one("#kind", Select).value == "script"
        assert str(form.query_one("#label-script").render()) == "script"
        box = form.query_one("#launch-form").region
        typed = [  # (field, keys): the order the user sees, top to bottom; preset does not show for a script
            ("script", "nope.py"),
            ("args", "--steps 3 --tag 'a b'"),
            ("nproc", None),
            ("gpus", None),
            ("hosts", None),
            ("slurm", None),
            ("queue", None),
            ("name", "mine"),
            ("env", "A=1 B='x y'"),
            ("max-restarts", "0"),
            ("on-alert", "echo alert"),
        ]
        for field, keys in typed:
            await pilot.press("tab")
            focused = form.focused
            assert focused is not None and focused.id == field
            assert box.contains_region(focused.region), field  # the cursor is where the user looks
            lit = [label.id for label in form.query(".form-row Label") if label.rich_style.bold]
            assert lit == [f"label-{field}"]  # and its label lights up
            if keys is not None:
                await pilot.press(*keys)
                assert form.query_one(f"#{field}", Input).value == keys
            if field == "script":
                # read in a thread
                await pilot_until(pilot, lambda: hint(form) == f"→ {tmp_path / 'nope.py'} not found")
                await pilot.press(*["backspace"] * len("nope.py"), *"tiny.py")
                await pilot_until(pilot, lambda: hint(form) == f"→ {tmp_path / 'tiny.py'} exists")
        await pilot.press("tab")
        assert form.focused is form.query_one("#launch")
        await pilot.press("shift+tab", "enter")  # enter in the last text field launches
        assert not isinstance(app.screen, LaunchForm)
        await pilot_until(pilot, lambda: len(runs(home)) == 1, timeout=15)
        (run_dir,) = runs(home)
        table = app.query_one(RunTable)
        await pilot_until(pilot, lambda: run_dir.name in row_keys(table), timeout=15)
        await pilot_until(pilot, lambda: cell(app, run_dir.name, "status") == "finished", timeout=30)
    spec = launched_spec(run_dir)
    assert spec["kind"] == "script" and spec["program"] == "tiny.py" and spec["cwd"] == str(tmp_path)
    assert spec["args"] == ["--steps", "3", "--tag", "a b"]
    assert (spec["nproc"], spec["gpus"], spec["nnodes"], spec["group"]) == (1, None, 1, None)  # hosts blank: here
    assert (spec["name"], spec["env"], spec["max_restarts"]) == ("mine", {"A": "1", "B": "x y"}, 0)
    assert spec["on_alert"] == ["echo", "alert"]


async def test_the_new_options_are_checked_as_the_cli_checks_them(home: Path) -> None:
    app = make_app(gpus=1)
    chosen: list[object] = []
    async with app.run_test(size=(80, 24)) as pilot:
        form = LaunchForm(0)
        app.push_screen(form, chosen.append)
        # Filled on mount: the changes that filling posts are handled before anything is typed (at load 12 one came
        # after the first enter and took its error down, as the values it was about had changed).
        await pilot_until(pilot, lambda: app.screen is form and form._mounted)
        await pilot.pause()
        error = form.query_one("#form-error")
        for field, value, message in [
            ("env", "A=1 [b]=2", "environment settings are NAME=VALUE, not '[b]=2'"),
            ("max-restarts", "-1", "max restarts must be at least 0, got -1"),
            ("max-restarts", "x", "max restarts takes a whole number, not 'x'"),
            ("on-alert", "no-such-program-here x", "--on-alert: no program 'no-such-program-here' on PATH"),
            ("name", "x", None),
        ]:
            box = form.query_one(f"#{field}", Input)
            box.focus()
            box.value = value
            await pilot.press("enter")
            if message is None:
                break
            # the key is handed on once the one before it has gone its way (typeahead.py): its answer can come
            # after press() returns on a loaded machine
            shown = lambda m=message: error.display and str(error.render()).startswith(m)  # noqa: E731
            await pilot_until(pilot, shown, f"never said {message!r}")  # brackets and all: never read as markup
            assert app.screen is form
            box.value = ""
        await pilot_until(pilot, lambda: chosen)
    (spec,) = chosen
    assert isinstance(spec, RunSpec) and (spec.kind, spec.name, spec.env, spec.max_restarts) == ("ddp", "x", (), 0)
    assert runs(home) == []


async def test_the_form_fits_80x24_for_every_kind(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        form = await open_launch_form(pilot)
        screen = form.region
        for kind in ("ddp", "dp", "script", "tune", "pipeline"):
            form.query_one("#kind", Select).value = kind
            await pilot.pause()
            for widget in form.query("Input, Select, Button"):
                if widget.display and widget.parent is not None and widget.parent.display:
                    assert screen.contains_region(widget.region), (kind, widget.id)
            for label in form.query(".form-row Label"):
                if label.parent is not None and label.parent.display:
                    assert str(label.render()).strip(), "every field has a visible label"


def test_a_search_by_its_shipped_name_and_the_hint_says_where_it_is(tmp_path: Path) -> None:
    from gpumon.tui.views.runs.form_spec import program_hint

    shipped = REPO / "trainers" / "searches" / "digits-asha.toml"
    spec = build_spec("tune", None, "digits-asha", "", "", "", visible=0, cwd=str(tmp_path))
    assert (spec.search, spec.name) == (str(shipped), "digits-asha")
    assert str(program_hint("tune", "digits-asha", str(tmp_path))) == f"→ shipped search digits-asha: {shipped}"
    assert "digits-asha, digits-grid, digits-optuna" in str(program_hint("tune", "", str(tmp_path)))
    assert str(program_hint("ddp", "-m pkg.train", "/w")) == "module pkg.train, imported in the run (from /w)"


def test_a_spec_fills_the_form_that_launches_it_again(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    spec = RunSpec(
        "script",
        program="train.py",
        args=("--lr", "0.1", "a b", "--batch-size", "64"),
        nproc=2,
        env=(("A", "1"), ("B", "x y")),
        name="exp-2",
        max_restarts=1,
        on_alert=("echo", "[alert]"),
        oom_retry=True,
        cwd=str(tmp_path),
    )
    values = values_from_spec(spec)
    assert values == FormValues(
        kind="script",
        program="train.py",
        args="--lr 0.1 'a b' --batch-size 64",
        nproc="2",
        name="exp-3",
        env="A=1 'B=x y'",
        max_restarts="1",
        on_alert="echo '[alert]'",
    )
    again = spec_values(values, 0, str(tmp_path), keep=spec)
    assert again == RunSpec(**{**spec.__dict__, "name": "exp-3"})
    trainer = values_from_spec(RunSpec("ddp", args=("--preset", "small", "--epochs", "2"), name="base"))
    assert (trainer.preset, trainer.args, trainer.name) == ("small", "--epochs 2", "base-2")
    with pytest.raises(SpecError, match="preset is for the kind's own trainer"):
        build_spec("ddp", "small", "train.py", "", "", "", visible=0, cwd=str(tmp_path))


async def test_e_clones_a_finished_run_to_edit_and_launch_and_its_detail_shows_the_full_command(
    home: Path, tmp_path: Path
) -> None:
    script = tiny_script(tmp_path, steps=3, sleep=0.01)
    base = RunSpec(
        "script",
        program="tiny.py",
        args=("--steps", "3", "[red]x[/red]"),
        env=(("SEED", "7"),),
        name="base",
        on_alert=("echo", "alert"),
        cwd=str(tmp_path),  # not the directory gpumon starts in: the clone resolves from here
    )
    first = wait(launch(base, RunStore(), 0), RunStore(), timeout=120)  # ended before the app looks
    assert first.state == "finished", first.state
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await open_runs(pilot, 1)
        await pilot_until(pilot, lambda: cell(app, first.id, "status") == "finished", timeout=30)
        await select(pilot, first.id)
        command = app.query_one(RunCommand)
        argv = [sys.executable, "-u", "tiny.py", "--steps", "3", "[red]x[/red]"]
        whole = f"$ SEED=7 {shlex.join(argv)} · in {tmp_path}"
        await pilot_until(pilot, lambda: str(command.render()) == whole)
        assert len(whole) > 78 and command.region.height >= 2  # wrapped, not cut
        assert "'[red]x[/red]'" in screen_text(app).replace("\n", "")
        await pilot.press("e")
        await pilot_until(pilot, lambda: isinstance(app.screen, LaunchForm))
        form = app.screen
        assert isinstance(form, LaunchForm) and str(form.query_one("#launch-form").border_title).startswith("Clone")
        assert form.values() == FormValues(
            kind="script",
            program="tiny.py",
            args="--steps 3 '[red]x[/red]'",
            nproc="1",
            name="base-2",
            env="SEED=7",
            on_alert="echo alert",
        )
        await pilot_until(pilot, lambda: hint(form) == f"→ {script} exists")
        await pilot.press("tab", "tab")
        assert form.focused is form.query_one("#args", Input)
        await pilot.press("end", *["backspace"] * len("3 '[red]x[/red]'"), "4", "enter")
        assert not isinstance(app.screen, LaunchForm)
        await pilot_until(pilot, lambda: table.row_count == 2, timeout=15)
        second = next(r for r in row_keys(table) if r != first.id)
        await pilot_until(pilot, lambda: app.query_one(RunsView).selected_id == second)
        await pilot_until(pilot, lambda: cell(app, second, "status") == "finished", timeout=30)
    spec = launched_spec(home / "runs" / second)
    assert spec["args"] == ["--steps", "4"] and spec["program"] == "tiny.py" and spec["cwd"] == str(tmp_path)
    assert (spec["name"], spec["env"], spec["on_alert"], spec["kind"]) == (
        "base-2",
        {"SEED": "7"},
        ["echo", "alert"],
        "script",
    )


async def test_e_is_refused_read_only_and_without_a_run(home: Path) -> None:
    app = make_app(gpus=1, readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r", "e")  # `e` waits for the Runs view (typeahead.py): its note can come after press()
        await pilot_until(pilot, lambda: any("Read-only" in n for n in notes(app)), "e was not refused")
        assert not isinstance(app.screen, LaunchForm)
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r", "e")
        await pilot_until(pilot, lambda: "Select a run first" in notes(app), "e was not refused")
        assert not isinstance(app.screen, LaunchForm)


async def test_a_short_terminal_scrolls_the_form_to_the_focused_field(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 14)) as pilot:
        form = await open_launch_form(pilot)
        scroll = form.query_one("#launch-form")
        for _ in range(13):  # down to Launch, below the fold at 14 rows
            await pilot.press("tab")
            focused = form.focused
            assert focused is not None
            await pilot_until(pilot, lambda f=focused: scroll.content_region.contains_region(f.region))
        assert form.focused is form.query_one("#launch") and scroll.scroll_y > 0


def test_the_queue_field_takes_launch_queues_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumon.tui.views.runs.form_spec import FormValues, QueuedLaunch, spec_values

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    (tmp_path / "train.py").write_text("print('hi')\n")
    values = FormValues(kind="script", program="train.py", queue="queue --gpus 2 --gpu-mem 20G --priority 3")
    queued = spec_values(values, 0, str(tmp_path), None)
    assert isinstance(queued, QueuedLaunch) and queued.spec.program == "train.py"
    assert queued.fields == {"gpus": 2, "gpu_mem": 20 * 2**30, "after": (), "priority": 3, "slots": None}
    assert not isinstance(spec_values(FormValues(kind="script", program="train.py"), 0, str(tmp_path), None),
                          QueuedLaunch)  # fmt: skip
    for wrong, said in (
        ("--gpus two", "whole number"),
        ("--gpu-mem 2G", "add --gpus N"),
        ("--gpus 1 --slots 2", "drop --slots"),
        ("--after nope", "--after"),
        ("later please", "is not an option"),
    ):
        with pytest.raises(SpecError, match=said):
            spec_values(FormValues(kind="script", program="train.py", queue=wrong), 0, str(tmp_path), None)
    with pytest.raises(SpecError, match="the queue picks the GPUs"):
        spec_values(FormValues(kind="script", program="train.py", gpus="0", queue="queue"), 1, str(tmp_path), None)
