"""Progress, ETA and time per step of real runs, and a loss that turns NaN, in `gpumon runs` and the Runs view."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.runs.reading.progress import Progress, eta_text, progress_text, rate_text
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.tui.views.runs.run_table import NONFINITE_STYLE, RunTable
from tests.conftest import make_app, pilot_until, wait_until
from tests.invariants import check_pace, check_progress

STEPPER = """
import os, sys, time
import torch
from gpumon import telemetry
gate, total = sys.argv[1], int(sys.argv[2])
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
telemetry.plan(steps=total)
for step in range(1, total + 1):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    telemetry.log(step=step, loss=loss.item() if step < 3 else float("nan"))
    time.sleep(0.05)
    if step == 5:  # the test looks at the run live, then lets it end
        end = time.monotonic() + 600  # a test that failed before its gate never leaves this run behind for good
        while not os.path.exists(gate) and time.monotonic() < end:
            time.sleep(0.02)
"""


def launched(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1].split()[-1]


def at_step(run_dir: Path, step: int, timeout: float = 120) -> None:
    """Until the run's telemetry reaches ``step``, read in this process (a `gpumon runs` a poll costs a CPU start)."""
    telemetry = RunTelemetry(run_dir, use_summary=False)
    assert wait_until(lambda: telemetry.update() >= 0 and (telemetry.step or 0) >= step, timeout=timeout, step=0.1)


def row(gpumon: Any, run_id: str) -> dict[str, Any]:
    done = gpumon("runs", "--json")
    found = next(r for r in json.loads(done.stdout)["runs"] if r["id"] == run_id)
    check_progress(found)
    check_pace(found)
    return found


def test_a_planned_run_shows_progress_and_an_eta_live_then_1_at_its_end_and_a_nan_loss(
    gpumon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, gate = tmp_path / "stepper.py", tmp_path / "gate"
    script.write_text(STEPPER)
    run_id = launched(gpumon("launch", "script", str(script), "--", str(gate), "20"))
    at_step(gpumon.home / "runs" / run_id, 5)  # the run waits there for the gate
    live = wait_until(
        lambda: (r := row(gpumon, run_id))["step"] == 5 and r["eta_s"] is not None and r, timeout=60, step=0.5
    )
    assert live, row(gpumon, run_id)
    assert live["total_steps"] == 20 and live["progress"] == pytest.approx(0.25)
    # 50 ms of sleep per step, plus the step; paused at the gate, its pace falls as it waits (issue 48)
    assert live["step_time_s"] >= 0.04 and live["step_time_s"] >= (live["quiet_s"] or 0)
    assert live["eta_s"] == pytest.approx(15 * live["step_time_s"])
    assert live["loss"] == "nan"  # NaN from step 3: a value, not the last finite loss
    text = gpumon("runs").stdout
    assert "25% " in text and ("it/s" in text or "s/it" in text) and " nan " in text, text
    gate.write_text("go")
    gpumon.wait_ended(run_id, timeout=120)
    ended = row(gpumon, run_id)
    assert ended["status"] == "finished", ended
    assert ended["total_steps"] == 20 and ended["progress"] == 1.0 and ended["eta_s"] is None
    assert ended["loss"] == "nan" and ended["step"] == 20
    assert set(ended) >= {"total_steps", "progress", "eta_s", "step_time_s"}
    text = gpumon("runs").stdout
    assert "100%" in text and " nan " in text, text
    # The index row (read by a fresh reader) keeps the same fields.
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    from gpumon.core.runs.reading.monitor import RunsMonitor

    monitor = RunsMonitor()
    again = next(s for s in monitor.refresh() if s.id == run_id)
    assert (again.total_steps, again.progress, again.total_source) == (20, 1.0, "plan")
    assert again.loss is not None and math.isnan(again.loss)
    detail = monitor.summary(run_id)
    assert detail is not None and detail.loss_note == "loss is nan from step 3"
    assert detail.loss_steps == (1, 2)  # the curve keeps its finite points only


async def test_the_runs_table_shows_progress_rate_and_a_nan_loss_in_the_warning_style(
    gpumon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, gate = tmp_path / "stepper.py", tmp_path / "gate"
    script.write_text(STEPPER)
    gate.write_text("go")
    run_id = launched(gpumon("launch", "script", str(script), "--", str(gate), "8"))
    gpumon.wait_ended(run_id, timeout=120)
    assert row(gpumon, run_id)["status"] == "finished"
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    app = make_app(gpus=1)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("r")
        table = app.query_one(RunTable)
        # the row, then the selected run's detail read (500 pauses of 0.02 s once ran out beside CPU hogs)
        await pilot_until(pilot, lambda: table.row_count, "the run never showed")
        with contextlib.suppress(AssertionError):  # a timeout is left to the assertions below, which say what
            await pilot_until(pilot, lambda: "step 8/8" in str(app.query_one("#run-info").render()), timeout=30)
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[labels.index("STEP") + 1 : labels.index("STEP") + 3] == ["PROGRESS", "SPEED"]
        assert table.get_cell(run_id, "progress").text.plain == "100%"
        assert table.get_cell(run_id, "speed").text.plain.endswith("it/s")
        loss = table.get_cell(run_id, "loss").text
        assert loss.plain == "nan" and any(span.style == NONFINITE_STYLE for span in loss.spans)
        info = str(app.query_one("#run-info").render())
        assert "step 8/8 (plan) 100%" in info and "loss nan" in info, info
        chart = app.query_one("#loss-chart")
        assert "loss is nan from step 3" in str(chart.border_subtitle)


TINY_LOSS = """
import time
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the same loss every step
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(12):
    loss = torch.nn.functional.mse_loss(model(x), y) * 2.114e-6
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.02)
print("last loss", loss.item(), flush=True)
"""


async def test_a_tiny_loss_keeps_three_significant_digits_in_gpumon_runs_and_the_app(
    gpumon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: a loss of 2.32e-06 read from backward() printed as 0.0000 in `gpumon runs`."""
    script = tmp_path / "tiny.py"
    script.write_text(TINY_LOSS)
    run_id = launched(gpumon("launch", "script", str(script)))
    gpumon.wait_ended(run_id, timeout=120)
    assert row(gpumon, run_id)["status"] == "finished"
    logs = (tmp_path / "home" / "runs" / run_id / "logs").glob("*.log")
    printed = float(
        next(line for log in logs for line in log.read_text().splitlines() if "last loss" in line).split()[-1]
    )
    expected = f"{printed:.2e}"  # the script's own number, 3 significant digits
    assert expected == "2.32e-06"
    (line,) = [line for line in gpumon("runs").stdout.splitlines() if line.startswith(run_id)]
    assert f" {expected} " in line and "0.0000" not in line, line
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    app = make_app(gpus=1)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("r")
        table = app.query_one(RunTable)
        await pilot_until(pilot, lambda: table.row_count, "the run never showed")
        assert table.get_cell(run_id, "loss").text.plain == expected


def test_the_window_of_step_times_is_bounded_and_a_plan_wins_over_a_frameworks_total() -> None:
    progress = Progress()
    progress.fold("total", {"total_steps": 600, "source": "tqdm"}, 0)
    assert progress.total == (600, "tqdm")
    progress.fold("plan", {"steps": 500}, 0)
    assert progress.total == (500, "plan")  # what the program declares beats a framework's guess
    for step in range(1, 100_001):
        progress.fold("step", {"step": step, "dt": 0.5 if step > 99_000 else 0.01}, 0)
    assert len(progress.dts[0]) <= 64 and progress.step_time_s == 0.5  # recent steps only, never the history
    fields = progress.fields(ended=False)
    assert fields["progress"] == 1.0 and fields["eta_s"] == 0.0
    assert progress.fields(ended=True)["eta_s"] is None
    restored = Progress.from_state(json.loads(json.dumps(progress.to_state())))
    assert restored.fields(ended=False) == fields
    assert rate_text(0.01) == "100 it/s" and rate_text(4.2) == "4.2 s/it" and rate_text(None) == ""
    assert rate_text(1 / 999.99) == rate_text(0.001) == "1k it/s"  # never "1000 it/s" beside "1k it/s"
    assert rate_text(1 / 99.97) == "100 it/s" and rate_text(1 / 99.94) == "99.9 it/s"  # nor "100.0"
    assert progress_text(0.37, 252) == "37% 4m12s" and eta_text(None) == ""


def test_our_ddp_trainer_sends_its_plan_and_ends_at_100_percent(gpumon) -> None:
    done = gpumon("launch", "ddp", "--nproc", "1", "--", "--epochs", "1")
    run_id = launched(done)
    gpumon.wait_ended(run_id, timeout=300)
    last = row(gpumon, run_id)
    assert last["status"] == "finished", last
    assert last["total_steps"] and last["step"] == last["total_steps"]  # the plan: epochs x batches
    assert last["progress"] == 1.0 and last["eta_s"] is None and last["step_time_s"] > 0
    assert gpumon("runs").stdout.count("100%") == 1
