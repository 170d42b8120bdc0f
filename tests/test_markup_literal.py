"""Text that is not ours reads as it is written in every widget: brackets are never taken for markup.

Each test sends texts with brackets (a pip extra, Rich tags, a closing tag with nothing to close) through a
real path of the app (a run's files, a search's events, a GPU source, a fleet host, the launch form) and
reads what the widget renders.
"""

from __future__ import annotations

import ast
import dataclasses
import time
from pathlib import Path

import pytest
from textual.widget import Widget
from textual.widgets import Input, Select, Static
from textual.widgets._toast import Toast

from gpumon.core.fleet.hosts import parse_host
from gpumon.core.fleet.model import FleetState, HostState
from gpumon.core.gpu import NoGpuSource
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample, Snapshot
from gpumon.core.runs.record.spec import INSTALL, RunSpec
from gpumon.core.sampler import Sampler
from gpumon.tui.app import GpumonApp
from gpumon.tui.views.doctor.text import DoctorText
from gpumon.tui.views.doctor.view import DoctorView
from gpumon.tui.views.fleet.host_screen import HostScreen
from gpumon.tui.views.runs.reading import RunActionDone
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.views.trials.trial_table import TrialTable
from gpumon.tui.views.trials.view import TrialActionDone, TrialsView
from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ConfirmScreen
from tests.conftest import FrozenHost, open_launch_form, pilot_until
from tests.fleet_data import StandInFleet, fleet_app, mixed_fleet
from tests.test_runs_view import record_run, screen_text
from tests.trials_data import T0, RecordedTrial, record_experiment

EXTRA = "pip install -e '.[train]'"
TAGS = "[red]x[/red] [/] [b]"  # a style pair, a closing tag with nothing to close (MarkupError), an open tag
TEXT = f"{EXTRA} {TAGS}"
RUN = "script-1121-101500-c3d4"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def rendered(widget: Widget) -> str:
    """What the widget shows, as plain characters (its markup, if any, already read)."""
    return str(widget.render())


def toasts(app: GpumonApp) -> list[str]:
    return [rendered(toast) for toast in app.screen.query(Toast)]


def title(widget: Widget) -> str:
    """The border title as it reads on screen (the getter hands back markup)."""
    return widget._border_title.plain if widget._border_title is not None else ""


class BracketSource:
    """A GPU whose name, process user and command hold brackets, as a real driver and users may write them."""

    name = "fixture"

    def sample(self) -> GpuSample:
        proc = GpuProcess(0, 4_000_000, 2**30, 10.0, "compute", user="[b]ops", command=f"python train.py {TAGS}")
        device = GpuDevice(0, "GPU [b]X[/b] [/]", "u0", gpu_util=10.0, mem_used=1, mem_total=2, processes=(proc,))
        return GpuSample(source=self.name, devices=(device,), time=time.time(), reason=f"GPU 1 not readable: {TAGS}")


def bracket_app() -> GpumonApp:
    host = dataclasses.replace(FrozenHost().sample(), hostname="[b]box")

    class Host:
        def sample(self):  # type: ignore[no-untyped-def]
            return host

    sampler = Sampler(BracketSource(), Host(), interval=1.0)  # type: ignore[arg-type]
    sampler.sample_once()
    return GpumonApp(sampler)


def record_bracket_run(home: Path) -> None:
    """A failed run whose error, exception, log and name hold brackets."""
    record_run(
        home,
        RUN,
        RunSpec("script", program="train.py", nproc=1, cwd="/tmp", name="[b]run[/b]"),
        {
            "state": "failed",
            "created": T0,
            "started": T0 + 1,
            "ended": T0 + 40,
            "exit_code": 1,
            "error": {"message": f"ModuleNotFoundError: {TEXT}", "rank": 0},
        },
        ranks=1,
        steps=20,
        exception=(0, "ModuleNotFoundError", TEXT),
        logs={0: f"step 20 {TEXT}\n"},
    )


async def test_the_gpu_view_shows_names_users_commands_and_reasons_as_written() -> None:
    app = bracket_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert "[b]box" in title(app.query_one(HostPanel))
        assert "GPU [b]X[/b] [/]" in title(app.query_one(GpuPanel))
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count == 1)
        assert TAGS in screen_text(app) and "[b]ops" in screen_text(app)  # the command and user cells
        assert TAGS in rendered(app.query_one("#top-info"))  # the source's reason in the top bar
        await pilot.press("tab", "T")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert isinstance(app.screen, ConfirmScreen)
        assert f"[b]ops: python train.py {TAGS}" in rendered(app.screen.query_one("#question"))
        await pilot.press("n")


async def test_the_launch_form_error_quotes_the_pip_extra(home: Path) -> None:
    app = bracket_app()
    async with app.run_test(size=(100, 30)) as pilot:
        form = await open_launch_form(pilot)
        form.query_one("#kind", Select).value = "script"
        await pilot.pause()
        form.query_one("#script", Input).value = ".[train]/[b]x[/b] [/].py"
        form.action_launch()  # the form's own check: no such program
        await pilot.pause()
        error = form.query_one("#form-error", Static)
        assert ".[train]/[b]x[/b] [/].py" in rendered(error)
        form.show_error(f"ddp runs need torch, which python cannot import: {INSTALL['torch']}")
        await pilot.pause()
        assert "pip install torch==2.13.0 && pip install -e '.[train]'" in rendered(error)


async def test_toasts_say_what_happened_as_written(home: Path) -> None:
    app = bracket_app()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.press("r")
        app.query_one(RunsView).post_message(RunActionDone(f"Could not start the run: {TEXT}", "error"))
        await pilot_until(pilot, lambda: any(f"Could not start the run: {TEXT}" in t for t in toasts(app)))
        await pilot.press("t")
        app.query_one(TrialsView).post_message(TrialActionDone(f"Could not ask to stop: {TEXT}", "error"))
        await pilot_until(pilot, lambda: any(f"Could not ask to stop: {TEXT}" in t for t in toasts(app)))


async def test_a_runs_error_log_name_and_filter_read_as_written(home: Path) -> None:
    record_bracket_run(home)
    app = bracket_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("r")
        table = app.query_one(RunTable)
        await pilot_until(pilot, lambda: table.row_count == 1)
        await pilot_until(pilot, lambda: TEXT in rendered(app.query_one("#run-info")))
        assert table.get_cell(RUN, "program").text.plain.startswith("[b]run")
        await pilot_until(pilot, lambda: f"step 20 {TEXT}" in screen_text(app))  # the log pane
        view = app.query_one(RunsView)
        await pilot.press("slash")
        for key in "[/]":
            await pilot.press(key)
        await pilot.press("enter")
        await pilot_until(pilot, lambda: view.filter == "[/]")
        assert "'[/]': 0" in title(table)  # no run matches; the title quotes the filter


async def test_the_doctor_quotes_the_error_as_written(home: Path) -> None:
    record_bracket_run(home)
    app = bracket_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("r")
        await pilot_until(pilot, lambda: app.query_one(RunTable).row_count == 1)
        await pilot.press("d")
        doctor = app.query_one(DoctorView)
        await pilot_until(pilot, lambda: TEXT in str(doctor.query_one(DoctorText).text))


async def test_trials_show_parameter_names_values_and_errors_as_written(home: Path) -> None:
    trial = RecordedTrial(
        "b2c3d_00000", {"opt[lr]": 0.1, "[b]mode": "[red]x[/red]"}, [0.9, 0.5], "ERROR", f"ValueError: {TEXT}"
    )
    record_experiment(home, "tune-1121-100000-a1b2", [trial], space=("opt[lr]", "[b]mode"))
    app = bracket_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("t")
        table = app.query_one(TrialTable)
        await pilot_until(pilot, lambda: table.row_count == 1)
        labels = [column.label.plain for column in table.columns.values()]
        assert "opt[lr]" in labels and "[b]mode" in labels
        assert table.get_cell(trial.id, "p:[b]mode").text.plain == "[red]x[/red]"
        while table.sort_key != "p:[b]mode":
            await pilot.press("s")
        assert "sort [b]mode" in table._border_subtitle.plain  # type: ignore[union-attr]
        view = app.query_one(TrialsView)
        await pilot_until(pilot, lambda: view.trial_id == trial.id)
        await pilot_until(pilot, lambda: TEXT in screen_text(app))  # the error pane
        assert "opt[lr]=0.1" in rendered(view.query_one("#trial-info"))


async def test_a_hosts_reason_reads_as_written() -> None:
    hosts = list(mixed_fleet().hosts)
    hosts[3] = HostState(parse_host("gpu4"), "down", reason=f"ssh: {TAGS}", since=hosts[3].since)
    gpuless = Snapshot(gpu=NoGpuSource(f"nvidia-smi: {TAGS}").sample(), host=FrozenHost().sample()).to_dict()
    hosts[4] = HostState(parse_host("gpu5"), "live", latency_ms=5.0, snapshot=gpuless)
    app = fleet_app(StandInFleet([FleetState(tuple(hosts), 0.0)], interval=0))
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause()
        assert f"ssh: {TAGS}" in screen_text(app)  # the host block's line
        await pilot.press("j", "j", "j", "enter")  # gpu4: down, nothing to open: a toast says why
        await pilot_until(pilot, lambda: any(f"no snapshot yet (ssh: {TAGS})" in t for t in toasts(app)))
        await pilot.press("j", "enter")  # gpu5: live with no GPU
        await pilot_until(pilot, lambda: isinstance(app.screen, HostScreen))
        await pilot_until(pilot, lambda: bool(app.screen.query("#no-gpu")))
        assert f"nvidia-smi: {TAGS}" in rendered(app.screen.query_one("#no-gpu"))


def test_every_toast_in_the_tui_is_literal() -> None:
    """A toast's text quotes something not ours (a message, a path, a run id) often enough: never markup."""
    missing = []
    for path in sorted(Path(__file__).parents[1].joinpath("gpumon", "tui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            notify = node.func.attr == "notify"
            handed = node.func.attr == "call_from_thread" and any(
                isinstance(a, ast.Attribute) and a.attr == "notify" for a in node.args
            )
            literal = any(k.arg == "markup" and isinstance(k.value, ast.Constant) and k.value.value is False
                          for k in node.keywords)  # fmt: skip
            if (notify or handed) and not literal:
                missing.append(f"{path.name}:{node.lineno}")
    assert not missing, f"notify(..., markup=False) missing at {missing}"
