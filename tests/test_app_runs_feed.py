"""What the app does with runs that start and end while it is open: the newest is selected (so `d` opens its
doctor), a normal end is a toast, and the Runs view lists them in the order `gpumon runs` prints them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import read_json, write_json
from gpumon.tui.views.doctor.view import DoctorView
from gpumon.tui.views.runs import newest
from gpumon.tui.views.runs.run_table import RunTable
from tests.conftest import make_app, notes, pilot_until
from tests.test_runs_view import FAILED, FINISHED, STOPPED, open_runs, record_run, record_runs

NEW = "script-1124-221500-9f9f"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    return tmp_path


def record_new_run(home: Path) -> Path:
    """A run started outside the app (from the CLI, by a script) while it is open; this test is its supervisor."""
    me, now = psutil.Process(), time.time()
    status = {"state": "running", "created": now, "started": now, "pid": me.pid}
    status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
    return record_run(home, NEW, RunSpec("script", program="train.py", cwd="/tmp"), status, steps=5, logs={0: "hi\n"})


async def test_a_run_started_elsewhere_is_selected_so_d_opens_its_doctor(home: Path) -> None:
    record_runs(home, live=False)
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 50)) as pilot:
        table = await open_runs(pilot, 3)
        assert table.selected_id() == STOPPED  # the newest of those there when the app opened
        await pilot.press("g")  # the user watches the GPUs when the run starts
        record_new_run(home)
        await pilot_until(pilot, lambda: app.context.selected_run == NEW)
        await pilot.press("d")
        doctor = app.query_one(DoctorView)
        await pilot_until(pilot, lambda: doctor.record is not None and doctor.record.id == NEW)
        await pilot.press("r")
        await pilot_until(pilot, lambda: table.selected_id() == NEW)
        assert str(table.ordered_rows[0].key.value) == NEW  # on top


async def test_a_new_run_leaves_a_selection_the_user_just_made(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(newest, "HOLD_S", 600.0)  # "just": however slow this machine is
    record_runs(home, live=False)
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 50)) as pilot:
        table = await open_runs(pilot, 3)
        table.focus()
        await pilot.press("down")
        assert table.selected_id() == FAILED
        record_new_run(home)
        await pilot_until(pilot, lambda: table.row_count == 4)
        assert table.selected_id() == FAILED and app.context.selected_run == FAILED


async def test_a_run_that_finishes_is_a_toast_in_any_view(home: Path) -> None:
    run_dir = record_new_run(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot_until(pilot, lambda: NEW in app.context.runs)  # the Runs view's worker reads while hidden too
        assert not any("finished" in n for n in notes(app))
        status = read_json(run_dir / "status.json")
        status.update(state="finished", ended=status["started"] + 75, exit_code=0)
        write_json(run_dir / "status.json", status)
        await pilot_until(pilot, lambda: any("finished" in n for n in notes(app)))
        assert [n for n in notes(app) if "finished" in n] == [f"{NEW} finished after 1m15s (exit code 0)"]


def gpumon_runs(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", "runs", *args], capture_output=True, text=True, env=env, timeout=120
    )


async def test_gpumon_runs_lists_in_the_runs_views_order_newest_first(home: Path) -> None:
    record_runs(home, live=False)
    table = gpumon_runs(home).stdout.splitlines()
    printed = [line.split()[0] for line in table[1:]]
    assert printed == [STOPPED, FAILED, FINISHED]  # newest first
    doc = json.loads(gpumon_runs(home, "--json").stdout)
    assert [run["id"] for run in doc["runs"]] == printed
    recent = json.loads(gpumon_runs(home, "--json", "--recent", "2").stdout)
    assert [run["id"] for run in recent["runs"]] == [STOPPED, FAILED]  # the newest two ended, in that order
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 50)) as pilot:
        shown: RunTable = await open_runs(pilot, 3)
        assert [str(row.key.value) for row in shown.ordered_rows] == printed
