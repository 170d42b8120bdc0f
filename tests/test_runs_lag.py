"""The Runs table keeps up with the run's log (issue 50): a step the log pane shows is in the run's row, read from
the ranks' events as they come, not from the supervisor's summary of two seconds ago; and the LOSS column keeps its
width whatever the loss, so the columns never jump."""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil
import pytest

from gpumon.core.events import EventWriter
from gpumon.core.runs.record.spec import RunSpec
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.widgets.log_view import LogView
from tests.conftest import Gpumon, make_app, pilot_until
from tests.test_runs_view import cell, open_runs, record_run

STEPPER = """
import time, torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.monotonic() + 300  # a test that failed never leaves it for long
step = 0
while time.monotonic() < end:
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    step += 1
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(0.05)
"""
LINE = re.compile(r"^step (\d+) ")


def logged(log: LogView) -> int:
    """The last step the log pane shows (0: none yet)."""
    steps = [int(m.group(1)) for line in log.lines if (m := LINE.match(line))]
    return max(steps, default=0)


async def test_a_step_the_log_pane_shows_is_in_the_runs_row(gpumon: Gpumon, monkeypatch: pytest.MonkeyPatch) -> None:
    (gpumon.cwd / "stepper.py").write_text(STEPPER)
    done = gpumon("launch", "script", "stepper.py", "--env", "OMP_NUM_THREADS=1")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1].split()[-1]
    monkeypatch.setenv("GPUMON_HOME", str(gpumon.home))
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 50)) as pilot:
        await open_runs(pilot, 1)
        log = app.query_one("#run-log", LogView)
        await pilot_until(pilot, lambda: logged(log) >= 5, "the log pane never showed a step", timeout=120)
        first, seen = logged(log), []
        # 40 steps of the log pane (2 s at the script's pace, longer beside CPU hogs): at every moment the row
        # shows what the pane shows or more. A row from the supervisor's summary was up to 2 s (40 steps) behind.
        deadline = time.monotonic() + 120
        while logged(log) < first + 40 and time.monotonic() < deadline:
            seen.append((logged(log), int(cell(app, run_id, "step") or 0)))
            await pilot.pause(0.02)
        behind = [(shown, row) for shown, row in seen if row < shown]
        assert logged(log) >= first + 40, "the log pane stopped moving"
        assert not behind, f"{len(behind)} of {len(seen)} looks: the row behind its log (log, row): {behind[:5]}"


def record_live(home: Path) -> tuple[str, EventWriter]:
    """A live run this test supervises (it reads as running) whose rank's writer the test holds."""
    me, now = psutil.Process(), time.time()
    status = {"state": "running", "created": now - 30, "started": now - 30, "pid": me.pid}
    status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
    run_id = "script-1206-120000-10ss"
    run_dir = record_run(home, run_id, RunSpec("script", program="train.py", cwd="/tmp"), status, ranks=1, steps=3)
    return run_id, EventWriter(run_dir, "rank0")


async def test_the_loss_column_keeps_its_width_whatever_the_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    run_id, rank = record_live(tmp_path)
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 40)) as pilot:
        table = await open_runs(pilot, 1)
        layouts = []
        for step, loss, shown in ((4, 12.3456, "12.3"), (5, 0.000123, "0.000123"), (6, 1.2e5, "1.20e+05")):
            rank.write("metrics", step=step, metrics={"loss": loss})
            await pilot_until(pilot, lambda shown=shown: cell(app, run_id, "loss") == shown, f"never {shown}")
            layouts.append(columns(table))
        rank.write("metrics", step=7, metrics={"loss": float("nan")})  # written as "nan" (JSON has no NaN)
        await pilot_until(pilot, lambda: cell(app, run_id, "loss") == "nan", "never nan")
        layouts.append(columns(table))
        assert all(layout == layouts[0] for layout in layouts), layouts  # not one column moved
        assert dict(layouts[0])["loss"] >= len("-2.32e-06")  # room for the longest loss


def columns(table: RunTable) -> list[tuple[str, int]]:
    """Each column's key and width as drawn, left to right."""
    return [(str(key.value), column.get_render_width(table)) for key, column in table.columns.items()]
