"""Pilot tests of the Runs view: what a user sees and what each key does.

Runs are recorded in a temporary state dir the way the supervisor and the
telemetry bootstrap write them (spec.json, status.json, event files, logs).
Two tests start real runs (a tiny Python script) from the launch form.
"""

from __future__ import annotations

import html
import math
import re
import shutil
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from textual.pilot import Pilot
from textual.widgets import ContentSwitcher, Input, Select

from gpumon.core.events import EventWriter, encode
from gpumon.core.runs.record.spec import RunSpec, SpecError
from gpumon.core.runs.record.store import RunStore, write_json
from gpumon.core.runs.supervision.launcher import launch
from gpumon.tui.app import GpumonApp
from gpumon.tui.views.gpus.view import GpusView
from gpumon.tui.views.runs.launch_form import LaunchForm, build_spec
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.widgets.charts import Chart, Series, line_chart
from gpumon.tui.widgets.log_view import LogView
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ConfirmScreen
from tests.conftest import make_app, notes, open_launch_form, pilot_until

T0 = 1_795_000_000.0  # recorded runs have fixed times: their elapsed never depends on the clock
FINISHED, FAILED, STOPPED, LIVE = (
    "ddp-1121-100000-a1b2",
    "script-1121-101500-c3d4",
    "dp-1121-102000-b7b7",
    "ddp-1121-103000-e5f6",
)


def record_run(
    home: Path,
    run_id: str,
    spec: RunSpec,
    status: dict[str, Any],
    ranks: int = 2,
    steps: int = 200,
    logs: dict[int | str, str] | None = None,
    exception: tuple[int, str, str] | None = None,
    notes: tuple[str, ...] = (),
    pids: tuple[int, ...] = (),
    every: float = 0.001,
) -> Path:
    """A run directory as gpumon writes it: spec, status, per-rank events (loss, heap per step), logs."""
    run_dir = home / "runs" / run_id
    (run_dir / "logs").mkdir(parents=True)
    write_json(run_dir / "spec.json", spec.to_dict())
    write_json(run_dir / "status.json", status)
    for name, text in (logs or {}).items():
        (run_dir / "logs" / (f"rank{name}.log" if isinstance(name, int) else name)).write_text(text)
    # The steps' times end at the run's end (a live run's: now), ``every`` s apart: the pace (SPEED) is by their
    # times, never by how fast this loop writes them. 1 ms: a heap growing 15 KiB a step fills the host within
    # 24 h at that pace, so the doctor calls it a leak (at 1 step/s it would take months: mere growth).
    end = float(status.get("ended") or time.time())
    for rank in range(ranks):
        writer = EventWriter(run_dir, f"rank{rank}")
        writer.write("proc_start", rank=rank, **({"pid": pids[rank]} if rank < len(pids) else {}))
        for step in range(1, steps + 1):
            at = end - (steps - step) * every
            if rank == 0:
                loss = 2.3 * math.exp(-step / 60) + 0.05
                metrics = {"step": step, "metrics": {"loss": loss, "samples_per_s": 812.0}}
                writer.write_line(encode("metrics", f"rank{rank}", metrics, now=at))
            heap = 50_000_000 + rank * 8_000_000 + step * 7800 * (rank + 1)
            fields = {"step": step, "dev": "cpu", "heap": heap, "rss": heap * 2}
            writer.write_line(encode("step", f"rank{rank}", fields, now=at))
        if exception is not None and exception[0] == rank:
            writer.write("exception", exc_type=exception[1], message=exception[2])
        for note in notes if rank == 0 else ():
            writer.write("note", text=note)
        writer.close()
    return run_dir


def record_runs(home: Path, live: bool = True) -> None:
    """Three ended runs (finished, failed with a root-cause rank, stopped) and, if asked, a live one.

    The live run's supervisor is this test process, so it reads as running; its ranks claim the
    simulated GPU 0's PIDs so the GPU view marks them.
    """
    record_run(
        home,
        FINISHED,
        RunSpec("ddp", nproc=2, cwd="/tmp"),
        {"state": "finished", "created": T0, "started": T0 + 1, "ended": T0 + 186, "exit_code": 0},
        logs={
            0: "".join(f"rank0 epoch 1 step {i} loss 0.{i:04d}\n" for i in range(1, 60)),
            1: "rank1 hello\nrank1 step 200 loss 0.1234\n",
            "launcher.log": "torchrun: starting 2 workers\n",
        },
        notes=("digits: 1437 train / 160 val samples",),
    )
    error = {"message": "RuntimeError: CUDA error: device-side assert triggered", "rank": 1}
    record_run(
        home,
        FAILED,
        RunSpec("script", program="train.py", nproc=2, cwd="/tmp"),
        {
            "state": "failed",
            "created": T0 + 900,
            "started": T0 + 901,
            "ended": T0 + 943,
            "exit_code": 1,
            "error": error,
        },
        steps=50,
        exception=(1, "RuntimeError", "CUDA error: device-side assert triggered"),
        logs={0: "rank0 ok\n", 1: "Traceback (most recent call last):\nRuntimeError: device-side assert\n"},
    )
    record_run(
        home,
        STOPPED,
        RunSpec("dp", nproc=1, cwd="/tmp"),
        {"state": "stopped", "created": T0 + 1200, "started": T0 + 1201, "ended": T0 + 1330, "exit_code": -15},
        ranks=1,
        steps=120,
        logs={0: "dp training\n"},
    )
    if live:
        me = psutil.Process()
        now = time.time()
        status = {"state": "running", "created": now - 65, "started": now - 64, "pid": me.pid}
        status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
        record_run(
            home,
            LIVE,
            RunSpec("ddp", nproc=2, cwd="/tmp"),
            status,
            steps=30,
            pids=(5000000, 5000001),
            logs={0: "live rank0\n", 1: "live rank1\n"},
        )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU to launch on, on any machine
    return tmp_path


def screen_text(app: GpumonApp) -> str:
    svg = app.export_screenshot()
    return html.unescape("".join(re.findall(r">([^<]*)</text>", svg))).replace("\xa0", " ")


def cell(app: GpumonApp, run_id: str, column: str) -> str:
    return str(app.query_one(RunTable).get_cell(run_id, column).text)


async def open_runs(pilot: Pilot[None], rows: int) -> RunTable:
    await pilot.press("r")
    table = pilot.app.query_one(RunTable)
    await pilot_until(pilot, lambda: table.row_count == rows)
    return table


def row_keys(table: RunTable) -> list[str]:
    return [str(row.key.value) for row in table.ordered_rows]


def info(app: GpumonApp) -> str:
    return str(app.query_one("#run-info").render())


async def select(pilot: Pilot[None], run_id: str) -> None:
    app = pilot.app
    assert isinstance(app, GpumonApp)
    app.query_one(RunTable).select_run(run_id)
    await pilot_until(pilot, lambda: app.query_one(RunsView).selected_id == run_id and run_id in info(app))


async def log_title(pilot: Pilot[None], text: str) -> None:
    log = pilot.app.query_one(LogView)
    await pilot_until(pilot, lambda: text in str(log.border_title))


async def test_runs_are_listed_newest_first_with_status_step_and_loss(home: Path) -> None:
    record_runs(home)
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_runs(pilot, 4)
        assert row_keys(table) == [LIVE, STOPPED, FAILED, FINISHED]
        assert [cell(app, k, "status") for k in row_keys(table)] == ["running", "stopped", "failed", "finished"]
        assert (
            cell(app, FINISHED, "step") == "200" and cell(app, FINISHED, "loss") == "0.132"
        )  # 3 significant digits (format.loss)
        assert cell(app, FINISHED, "elapsed") == "3m05s"
        assert cell(app, FINISHED, "memory") == "▲+15.2 KiB/it"  # its heap grows 15.2 KiB per step: a leak
        assert table.get_cell(FAILED, "status").text.style == "bold red"
        assert table.get_cell(LIVE, "status").text.style == "bold green"
        text = screen_text(app)
        assert "runs · 4 · 1 live" in text and "ddp-1121-103000-e5f6" in text and "trainers.ddp" in text


async def test_r_and_g_switch_views_and_gpu_keys_do_nothing_in_runs(home: Path) -> None:
    record_runs(home, live=False)
    app = make_app(gpus=4)
    async with app.run_test(size=(120, 40)) as pilot:
        switcher = app.query_one("#views", ContentSwitcher)
        processes = app.query_one(ProcessTable)
        assert switcher.current == "body" and app.view == "gpus"
        assert "GPUs" in screen_text(app) and "Runs" in screen_text(app)  # the tab strip
        await open_runs(pilot, 3)
        assert switcher.current == "runs" and app.view == "runs"
        footer_keys = set(app.screen.active_bindings)
        assert {"n", "T", "K", "l", "g"} <= footer_keys and not {"s", "a", "R", "2"} & footer_keys
        assert app.screen.active_bindings["t"].binding.action == "view('trials')"  # not SIGTERM outside GPUs
        before = (app.query_one(GpusView).selected, processes.sort_key, processes.sort_reverse, processes.show_all)
        await pilot.press("2", "right", "s", "R", "a", "g")
        # the keys go on in order as messages, handled after press returns under load: once g has shown the GPUs,
        # the five before it were handled (and did nothing)
        await pilot_until(pilot, lambda: switcher.current == "body", "g never showed the GPUs", 30)
        assert (
            app.query_one(GpusView).selected,
            processes.sort_key,
            processes.sort_reverse,
            processes.show_all,
        ) == before
        assert not isinstance(app.screen, ConfirmScreen)
        assert {"s", "a", "t", "r"} <= set(app.screen.active_bindings) and "n" not in app.screen.active_bindings
        await pilot.press("2")
        await pilot_until(pilot, lambda: app.query_one(GpusView).selected == 2, "2 never selected GPU 2", 30)
        await pilot.press("alt+r")
        await pilot_until(pilot, lambda: app.view == "runs", "alt+r never showed Runs", 30)
        await pilot.press("alt+g")
        await pilot_until(pilot, lambda: app.view == "gpus", "alt+g never showed the GPUs", 30)


async def test_log_tail_cycles_through_ranks_and_the_launcher_log(home: Path) -> None:
    record_runs(home, live=False)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, 3)
        await select(pilot, FINISHED)
        await log_title(pilot, "rank 0")
        # the newest line shows
        await pilot_until(pilot, lambda: "rank0 epoch 1 step 59 loss 0.0059" in screen_text(app))
        await pilot.press("l")
        await log_title(pilot, "rank 1")
        await pilot_until(pilot, lambda: "rank1 step 200 loss 0.1234" in screen_text(app))
        await pilot.press("l")
        await log_title(pilot, "launcher")
        await pilot_until(pilot, lambda: "torchrun: starting 2 workers" in screen_text(app))
        await pilot.press("L", "L")
        await log_title(pilot, "rank 0")


async def test_failed_run_shows_its_error_and_root_cause_rank(home: Path) -> None:
    record_runs(home, live=False)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, 3)
        await select(pilot, FAILED)
        text = info(app)
        assert "failed (exit 1)" in text
        assert "rank 1 (root cause): RuntimeError: CUDA error: device-side assert triggered" in text
        await select(pilot, FINISHED)
        assert "✗" not in info(app) and "digits: 1437 train / 160 val samples" in info(app)


async def test_charts_show_loss_and_per_rank_memory(home: Path) -> None:
    record_runs(home, live=False)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, 3)
        await select(pilot, FINISHED)
        loss = app.query_one("#loss-chart", Chart)
        memory = app.query_one("#memory-chart", Chart)
        await pilot_until(pilot, lambda: len(memory.series) == 3)  # two ranks and the fitted line of the leaking one
        loss_text, memory_text = loss.render().plain, memory.render().plain
        assert "2.31" in loss_text and "0.132" in loss_text and "step 200" in loss_text
        assert "58.3 MiB" in memory_text and "47.7 MiB" in memory_text
        assert any(0x2800 < ord(c) <= 0x28FF for c in loss_text + memory_text)  # Braille dots drawn
        assert "r0" in str(memory.border_subtitle) and "r1" in str(memory.border_subtitle)
        assert "fit r1" in str(memory.border_subtitle)
        assert "CPU heap" in str(memory.border_title)


async def test_rows_change_in_place_and_runs_come_and_go(home: Path) -> None:
    record_runs(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_runs(pilot, 4)
        key = next(k for k in table.rows if k.value == LIVE)
        elapsed = cell(app, LIVE, "elapsed")
        await pilot_until(pilot, lambda: cell(app, LIVE, "elapsed") != elapsed, timeout=5)  # the clock ticks in place
        assert next(k for k in table.rows if k.value == LIVE) is key
        shutil.rmtree(home / "runs" / STOPPED)
        await pilot_until(pilot, lambda: table.row_count == 3)
        assert STOPPED not in row_keys(table) and next(k for k in table.rows if k.value == LIVE) is key


async def test_gpu_view_marks_processes_of_runs(home: Path) -> None:
    record_runs(home)
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        processes = app.query_one(ProcessTable)
        # from the live run's proc_start events
        await pilot_until(pilot, lambda: app.context.run_pids.get(5000000) == LIVE)
        await pilot_until(pilot, lambda: str(processes.get_cell("0:5000000", "run").text) == "ddp-e5f6 r0")  # rank 0
        app.set_run_pids({5000010: "pipeline-1121-120000-9f9f"})  # a map set by hand (the simulated GPU 1)
        await pilot.press("a")
        await pilot_until(pilot, lambda: processes.show_all, "a never showed every process", 30)
        assert str(processes.get_cell("1:5000010", "run").text) == "pipe-9f9f"
        assert str(processes.get_cell("0:5000000", "run").text) == ""
        assert "RUN" in screen_text(app) and "pipe-9f9f" in screen_text(app)


async def test_launch_form_shows_bad_values_inline_and_starts_nothing(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        form = await open_launch_form(pilot)
        assert form.query_one("#nproc", Input).value == "2"  # ddp on a CPU machine: 2 processes
        form.query_one("#nproc", Input).value = "x"
        form.query_one("#nproc", Input).focus()
        await pilot.press("enter")
        error = form.query_one("#form-error")
        # under load enter is handled after press returns: its sign is the error shown, then the form must stay
        await pilot_until(pilot, lambda: error.display, "enter showed no error", 30)
        assert app.screen is form
        assert error.display and "processes takes a whole number, not 'x'" in str(error.render())
        form.query_one("#nproc", Input).value = "2"
        form.query_one("#gpus", Input).focus()
        await pilot.press("3", "enter")
        said = "asked for GPU 3 but this machine shows no GPU"
        await pilot_until(pilot, lambda: said in str(error.render()), "enter never refused GPU 3", 30)
        assert app.screen is form
        assert not (home / "runs").exists() or not any((home / "runs").iterdir())
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, LaunchForm), "escape never closed the form", 30)
        # nothing to wait for that is absent: the form is gone (handled), and a launch would be a worker; once
        # every worker is done, none can still write a run
        await pilot.pause()
        await pilot_until(pilot, lambda: all(w.is_finished for w in app.workers), "a worker never ended")
        assert not (home / "runs").exists() or not any((home / "runs").iterdir())


async def test_readonly_neither_launches_nor_stops(home: Path) -> None:
    record_runs(home)
    app = make_app(gpus=1, readonly=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_runs(pilot, 4)
        await select(pilot, LIVE)
        await pilot.press("n", "T", "K")
        await pilot_until(pilot, lambda: sum("Read-only" in n for n in notes(app)) >= 3, "a key was never refused", 30)
        assert not isinstance(app.screen, (LaunchForm, ConfirmScreen))
        assert sum("Read-only" in n for n in notes(app)) == 3


async def test_stop_asks_first_and_ended_runs_are_refused(home: Path) -> None:
    record_runs(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_runs(pilot, 4)
        await select(pilot, FINISHED)
        await pilot.press("T")
        await pilot_until(pilot, lambda: any(f"{FINISHED} is not running (finished)" in n for n in notes(app)))
        assert not isinstance(app.screen, ConfirmScreen)
        await select(pilot, LIVE)  # its 'supervisor' is this test process: answer no
        for key in ("T", "K"):
            await pilot.press(key)
            await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert isinstance(app.screen, ConfirmScreen) and LIVE in str(app.screen.question)
            await pilot.press("n")
            await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert app.query_one(RunsView).summaries[LIVE].state == "running"


TINY_SCRIPT = """\
import sys, time
from gpumon import telemetry
for step in range(1, {steps} + 1):
    telemetry.log(step=step, loss=1.0 / step)
    print(f"tiny step {{step}}", flush=True)
    time.sleep({sleep})
"""


def tiny_script(folder: Path, steps: int, sleep: float) -> Path:
    path = folder / "tiny.py"
    path.write_text(TINY_SCRIPT.format(steps=steps, sleep=sleep))
    return path


async def test_launching_a_script_from_the_form(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_script(tmp_path, steps=5, sleep=0.05)
    monkeypatch.chdir(tmp_path)  # a path relative to gpumon's working directory, as a user types it
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        form = await open_launch_form(pilot)
        await pilot.press("down", "down", "down", "down", "down", "enter")  # open the kind list, pick 'script'
        kind = form.query_one("#kind", Select)
        await pilot_until(pilot, lambda: kind.value == "script", "the kind list never picked script", 30)
        assert form.query_one("#nproc", Input).value == "1"  # the default follows the kind
        await pilot.press("tab")
        script = form.query_one("#script", Input)
        # preset does not apply to a script: tab goes on to the script's field
        await pilot_until(pilot, lambda: form.focused is script, "tab never reached the script", 30)
        await pilot.press(*"tiny.py")
        await pilot_until(pilot, lambda: script.value == "tiny.py", "the script was never typed", 30)
        await pilot.press("enter")
        await pilot_until(pilot, lambda: not isinstance(app.screen, LaunchForm), "enter never launched", 30)
        table = app.query_one(RunTable)
        await pilot_until(pilot, lambda: table.row_count == 1, timeout=15)
        run_id = row_keys(table)[0]
        assert run_id.startswith("script-") and app.query_one(RunsView).selected_id == run_id
        await pilot_until(pilot, lambda: cell(app, run_id, "status") == "finished", timeout=30)
        assert any(f"Started {run_id}" in n for n in notes(app))
        await pilot_until(pilot, lambda: cell(app, run_id, "step") == "5")
        await pilot_until(pilot, lambda: "tiny step 5" in screen_text(app))


async def test_T_stops_a_real_run_and_leaves_no_process(home: Path, tmp_path: Path) -> None:
    script = tiny_script(tmp_path, steps=600, sleep=0.1)
    record = launch(RunSpec("script", program=str(script), cwd=str(tmp_path)), RunStore(), 0)
    try:
        app = make_app(gpus=1)
        async with app.run_test(size=(120, 40)) as pilot:
            await open_runs(pilot, 1)
            await pilot_until(
                pilot, lambda: cell(app, record.id, "status") == "running" and cell(app, record.id, "step")
            )
            status = app.query_one(RunsView).summaries[record.id].record.status
            pids = [status["supervisor_pid"], status["pid"]]
            await pilot.press("T")
            await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            await pilot_until(pilot, lambda: cell(app, record.id, "status") == "stopped", timeout=20)
            assert any(f"stopping {record.id}" in n for n in notes(app))
            assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    finally:
        final = RunStore().load(record.dir)
        if final is not None and final.live:
            from gpumon.core.runs.supervision.launcher import stop

            stop(final, kill=True)


async def test_runs_view_fits_80x24(home: Path) -> None:
    record_runs(home)
    app = make_app(gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot, 4)
        # the rows are in before the view is laid out and drawn (beside CPU hogs, the footer came later)
        await pilot_until(pilot, lambda: "K kill" in screen_text(app) and "ddp-e5f6" in screen_text(app))
        screen = app.screen.region
        for selector in ("#top-bar", "#run-table", "#run-info", "#loss-chart", "#memory-chart", "#run-log"):
            assert screen.contains_region(app.query_one(selector).region), selector
        assert app.query_one("#run-log").region.height >= 3 and app.query_one("#loss-chart").region.height >= 5
        text = screen_text(app)
        assert "ddp-e5f6" in text and "running" in text  # short ids at 80 columns
        assert "n new run" in text and "T stop" in text and "K kill" in text


async def test_palette_offers_views_and_run_commands(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 30)):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"View: GPUs", "View: Runs", "Runs: new run…", "Runs: stop the selected run"} <= set(titles)
        next(c for c in app.get_system_commands(app.screen) if c.title == "View: Runs").callback()
        assert app.view == "runs"


def test_form_spec_passes_the_preset_and_splits_extra_args(tmp_path: Path) -> None:
    spec = build_spec("ddp", "small", "", "", "", "--epochs 1 --name 'a b'", visible=0, cwd=str(tmp_path))
    assert spec.nproc == 2 and spec.gpus is None and spec.program is None
    assert spec.args == ("--preset", "small", "--epochs", "1", "--name", "a b")
    (tmp_path / "train.py").write_text("print(1)\n")
    script = build_spec("script", "small", "train.py", "1", "", "", visible=0, cwd=str(tmp_path))
    assert script.program == "train.py" and script.args == ()  # no preset for a plain script
    with pytest.raises(SpecError, match="dp runs in one process"):
        build_spec("dp", None, "", "2", "", "", visible=0, cwd=str(tmp_path))
    with pytest.raises(SpecError, match="arguments: No closing quotation"):
        build_spec("ddp", None, "", "2", "", "--name 'unclosed", visible=0, cwd=str(tmp_path))
    with pytest.raises(SpecError, match=r"program not found: nope\.py"):
        build_spec("script", None, "nope.py", "1", "", "", visible=0, cwd=str(tmp_path))


def test_chart_downsamples_20000_points_to_its_width_and_keeps_a_spike() -> None:
    steps = tuple(range(1, 20_001))
    values = tuple(5.0 if s == 12_345 else 1.0 + s / 1e6 for s in steps)
    started = time.perf_counter()
    lines = line_chart([Series(steps, values)], width=40, height=6, fmt=lambda v: f"{v:.1f}")
    assert time.perf_counter() - started < 0.5
    assert len(lines) == 6 and all(len(line.plain) == 40 for line in lines)
    assert lines[0].plain.startswith("5.0┤") and lines[-2].plain.startswith("1.0┤")
    assert any(ch != " " for ch in lines[0].plain[4:])  # the one-step spike still reaches the top
    assert lines[-1].plain.split() == ["1", "step", "20000"]
    assert line_chart([], 20, 3, str, "no loss yet")[1].plain.strip() == "no loss yet"


async def test_a_long_run_list_shows_the_newest_page_and_filters_by_keys(home: Path) -> None:
    runs = home / "runs"
    for n in range(620):  # 620 ended runs: every 10th failed, the rest finished
        state = "failed" if n % 10 == 0 else "finished"
        path = runs / f"ddp-0101-{n:06d}-{n:04x}"
        path.mkdir(parents=True)
        write_json(path / "spec.json", RunSpec("ddp", nproc=2, cwd="/tmp").to_dict())
        write_json(path / "status.json", {"state": state, "created": T0 + n, "started": T0 + n, "ended": T0 + n + 5})
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_runs(pilot, 500)
        assert "runs · 620" in str(table.border_title) and "newest 500 shown" in str(table.border_title)
        assert row_keys(table)[0] == "ddp-0101-000619-026b"  # the newest on top
        await pilot.press("slash")
        await pilot.press(*"failed", "enter")
        await pilot_until(pilot, lambda: table.row_count == 62)
        assert "'failed': 62" in str(table.border_title) and "shown" not in str(table.border_title)
        assert all(str(cell(app, key, "status")) == "failed" for key in row_keys(table))
        assert table.has_focus  # back on the list: its keys work again
        await pilot.press("slash", "escape")
        await pilot_until(pilot, lambda: table.row_count == 500)


async def test_a_stalled_run_says_where_its_ranks_wait_in_its_detail(home: Path) -> None:
    me = psutil.Process()
    now = time.time()
    where = "rank 0 waits in <module> at train[1].py:18 (DataLoader): its worker 41 waits in __getitem__ at x.py:3"
    stall = {"since": now - 130, "step": 30, "where": [where]}
    status = {"state": "stalled", "created": now - 200, "started": now - 199, "pid": me.pid, "stall": stall}
    status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
    record_run(home, LIVE, RunSpec("script", program="train.py", nproc=1, cwd="/tmp"), status, ranks=1, steps=30)
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_runs(pilot, 1)
        await select(pilot, LIVE)
        said = re.search(r"stalled at step 30 for (\d+)m(\d+)s", info(app))
        assert said and 130 <= int(said[1]) * 60 + int(said[2]) <= time.time() - stall["since"] + 1, info(app)
        assert where in info(app)  # literal: not read as markup
