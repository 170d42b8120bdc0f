"""Tables at 80, 120 and 200 columns, and the GPUs view's htop/nvitop habits (< > / p c).

A column shows its values whole when they fit, ends a cut value in "…", and a
column that does not fit is named in the table's title, never dropped silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpumon.core.gpu.simulated import SimulatedSource
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample
from gpumon.core.procinfo import ProcessInfoCache
from gpumon.core.runs.record.spec import RunSpec
from gpumon.tui.views.gpus.view import GpusView
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.trials.trial_table import TrialTable
from gpumon.tui.widgets.gpu_panels import GpuPanel
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app, pilot_until, wait_until
from tests.test_app import screen_text
from tests.test_runs_view import T0, record_run
from tests.trials_data import record_done

TORCHRUN = "python -m torch.distributed.run --nproc-per-node 8 train.py --model resnet50"  # a simulated command


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    return tmp_path


def commands(table: ProcessTable) -> list[str]:
    return [table.get_row(row.key)[-1].text.plain for row in table.ordered_rows]


# -- widths ---------------------------------------------------------------------------------------------------
async def test_command_is_whole_when_it_fits_after_a_resize_and_ends_in_an_ellipsis_when_cut() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(80, 30)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot.press("a")
        await pilot_until(pilot, lambda: table.row_count == 3)
        cut = [c for c in commands(table) if c.startswith("python -m torch")]
        assert cut and cut[0].endswith("…") and len(cut[0]) < len(TORCHRUN)
        assert "python -m torch" in screen_text(app)
        await pilot.resize_terminal(200, 30)  # the terminal grows: COMMAND takes the room
        await pilot_until(pilot, lambda: TORCHRUN in screen_text(app))
        assert TORCHRUN in commands(table)
        assert "hidden" not in str(table.border_title)
        await pilot.resize_terminal(60, 30)  # too narrow for every column: those left out are named
        await pilot_until(pilot, lambda: "hidden" in str(table.border_title))
        # the note's short form: the whole title fits the border (60 less the corners and spaces)
        assert "2 hidden: RUN, SM%" in str(table.border_title) and len(str(table.border_title)) <= 60 - 6
        assert [str(c.label) for c in table.columns.values()] == ["GPU", "PID", "USER", "GPU MEM", "COMMAND"]


@pytest.mark.parametrize("width", [200, 120, 80])
async def test_runs_kind_is_whole_and_a_hidden_program_is_said(home: Path, width: int) -> None:
    run_id = "mp-1121-100000-a1b2"
    spec = RunSpec("model-parallel", cwd="/tmp")
    record_run(home, run_id, spec, {"state": "finished", "created": T0, "started": T0 + 1, "ended": T0 + 20}, 1, 5)
    app = make_app(gpus=1)
    async with app.run_test(size=(width, 30)) as pilot:
        await pilot.press("r")
        table = app.query_one(RunTable)
        await pilot_until(pilot, lambda: table.row_count == 1)
        labels = [str(c.label) for c in table.columns.values()]
        title = str(table.border_title)
        if width == 200:
            assert "PROGRAM" in labels and "hidden" not in title
        elif width == 120:  # the short id leaves room for PROGRAM; SAMPLES/S goes first, named
            assert "PROGRAM" in labels and "PROGRAM" not in title and "SAMPLES/S" in title
        else:
            assert "PROGRAM" not in labels and "PROGRAM" in title and len(title) <= width - 6  # fits its border
        if width == 80:  # LOSS keeps its width whatever its values (issue 50): a kind this long goes, named
            assert "4 columns hidden: KIND, SAMP/S, SPEED, PROGRAM" in title, (labels, title)
            return
        assert table.get_cell(run_id, "kind").text.plain == "model-parallel"
        assert "model-parallel" in screen_text(app)


@pytest.mark.parametrize("width", [200, 120, 80])
async def test_trials_name_the_metrics_that_do_not_fit(home: Path, width: int) -> None:
    record_done(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(width, 40)) as pilot:
        await pilot.press("t")
        table = app.query_one(TrialTable)
        await pilot_until(pilot, lambda: table.row_count == 6)
        labels = [str(c.label) for c in table.columns.values()]
        title = str(table.border_title)
        assert "loss" in labels  # the experiment's metric, always
        if width >= 120:
            assert "acc" in labels and "hidden" not in title
        else:
            # acc first, then GPU MEM, TIME and BEST (issue 35: never a table scrolled sideways), the note fitting
            assert "acc" not in labels and "hidden: acc, GPU MEM, TIME, BEST" in title and len(title) <= width - 6


# -- sort keys and header clicks ---------------------------------------------------------------------------------
async def test_angle_brackets_sort_by_the_neighbouring_column_and_a_header_click_sorts() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot.press("a")
        procs = {f"{p.gpu_index}:{p.pid}": p for d in app.context.snapshot.gpu.devices for p in d.processes}  # type: ignore[union-attr]
        keys = lambda: [str(r.key.value) for r in table.ordered_rows]  # noqa: E731
        assert table.sort_key == "mem"
        await pilot.press("greater_than_sign")  # mem -> SM%
        assert table.sort_key == "sm" and "sort sm ↓" in str(table.border_subtitle)
        await pilot.press("less_than_sign", "less_than_sign")  # SM% -> mem -> USER
        assert table.sort_key == "user"
        assert keys() == sorted(procs, key=lambda k: procs[k].user or "")
        await pilot.press("less_than_sign", "less_than_sign", "less_than_sign")  # USER -> PID -> GPU -> COMMAND
        assert table.sort_key == "command"
        x = 1 + sum(w + 2 for _, _, w in table.column_set[:1])  # the PID header, after GPU
        await pilot.click(ProcessTable, offset=(x + 2, 1))
        assert table.sort_key == "pid" and table.sort_reverse
        assert keys() == sorted(procs, key=lambda k: procs[k].pid, reverse=True)


async def test_trials_angle_brackets_sort_by_the_neighbouring_column(home: Path) -> None:
    record_done(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("t")
        table = app.query_one(TrialTable)
        await pilot_until(pilot, lambda: table.row_count == 6)
        assert table.sort_key == "id"
        await pilot.press("greater_than_sign")
        assert table.sort_key == "status"
        await pilot.press("less_than_sign", "less_than_sign")  # wraps to the last column
        assert table.sort_key == "gpu" and "sort GPU MEM" in str(table.border_subtitle)


# -- filter ------------------------------------------------------------------------------------------------------
async def test_slash_filters_the_processes_and_escape_clears() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot.press("a")
        await pilot_until(pilot, lambda: table.row_count == 3)
        await pilot.press("slash", *"alice", "enter")
        await pilot_until(pilot, lambda: table.row_count == 1)
        assert all(p.user == "alice" for p in table.processes.values())
        assert "filter 'alice': 1 of 3" in str(table.border_title)
        assert table.has_focus
        await pilot.press("slash", *" train", "enter")  # the box opens with the filter; words narrow it
        await pilot_until(pilot, lambda: "filter 'alice train'" in str(table.border_title))
        await pilot.press("slash", *"5000010")  # a PID, typed: digits go to the box, not to GPU selection
        assert app.query_one(GpusView).selected == 0
        await pilot.press("escape")
        await pilot_until(pilot, lambda: table.row_count == 3)
        assert "filter" not in str(table.border_title) and not app.query_one("#process-filter").display


# -- tree --------------------------------------------------------------------------------------------------------
class ChildSource:
    """A GPU we do not have, used by a real child of a real child of this test: its parents are psutil's."""

    name = "fixture"

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.procinfo = ProcessInfoCache()

    def sample(self) -> GpuSample:
        user, command, created, parents = self.procinfo.lookup(self.pid)
        proc = GpuProcess(0, self.pid, 1024**3, 50.0, "compute", user, command, created, parents=parents)
        sim = SimulatedSource(1, seed=1).sample().devices[0]
        device = GpuDevice(0, "Fixture GPU", "GPU-0", gpu_util=50.0, mem_used=1024**3, mem_total=8 * 1024**3,
                           processes=(proc, *sim.processes))  # fmt: skip
        return GpuSample(source="fixture", devices=(device,), time=time.time())


@pytest.fixture
def grandchild() -> Iterator[tuple[int, int]]:
    """(middle pid, grandchild pid): this test starts a shell-less parent that starts a sleeper."""
    code = "import subprocess,sys,time; p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); print(p.pid, flush=True); time.sleep(60)"  # noqa: E501
    middle = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert middle.stdout is not None
    pid = int(middle.stdout.readline())
    # the sleeper's own command line, not its parent's copied at fork
    assert wait_until(lambda: psutil.Process(pid).cmdline()[-1:] == ["import time; time.sleep(60)"], timeout=30)
    try:
        yield middle.pid, pid
    finally:
        os.kill(pid, 9)
        if middle.returncode is None:
            middle.kill()
            middle.wait()


def test_the_core_hands_the_parent_chain_and_follows_a_reparenting(grandchild: tuple[int, int]) -> None:
    middle, pid = grandchild
    cache = ProcessInfoCache()
    parents = cache.lookup(pid)[3]
    assert [p for p, _ in parents[:2]] == [middle, os.getpid()], parents
    assert "subprocess.Popen" in parents[0][1]  # its command line
    assert all(p > 1 for p, _ in parents)  # init left out
    os.kill(middle, 9)  # its parent dies: it re-parents (to init or a subreaper), and the chain follows
    assert wait_until(lambda: middle not in [p for p, _ in cache.lookup(pid)[3]], timeout=30), cache.lookup(pid)
    assert cache.lookup(pid)[1] is not None and "time.sleep(60)" in str(cache.lookup(pid)[1])


async def test_p_shows_each_process_under_its_parents(grandchild: tuple[int, int]) -> None:
    middle, pid = grandchild
    app = make_app(ChildSource(pid), ticks=2)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot_until(pilot, lambda: table.row_count == 3, timeout=30)
        await pilot.press("p")
        await pilot_until(pilot, lambda: f"^{middle}" in [str(r.key.value) for r in table.ordered_rows], timeout=30)
        rows = [str(r.key.value) for r in table.ordered_rows]
        assert rows.index(f"^{os.getpid()}") < rows.index(f"^{middle}") < rows.index(f"0:{pid}"), rows
        command = table.get_cell(f"0:{pid}", "command").text.plain
        assert command.lstrip(" │").startswith("└─ ") and "time.sleep(60)" in command, command
        assert table.get_cell(f"^{middle}", "pid").text.plain == str(middle)
        assert "tree" in str(table.border_subtitle)
        simulated = [r for r in rows if r.startswith("0:") and r != f"0:{pid}"]
        assert simulated and all(table.get_cell(r, "command").text.plain[0] != "└" for r in simulated)  # no parents
        await pilot.press("p")
        await pilot_until(pilot, lambda: table.row_count == 3)
        assert not any(str(r.key.value).startswith("^") for r in table.ordered_rows)


# -- compact -----------------------------------------------------------------------------------------------------
async def test_c_shows_every_gpu_in_one_line_at_80x24() -> None:
    app = make_app(gpus=8)
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(GpusView)
        screen = app.screen.region

        def all_visible() -> bool:
            panels = list(app.query(GpuPanel))
            return len(panels) == 8 and all(p.region.height and screen.contains_region(p.region) for p in panels)

        await pilot_until(pilot, lambda: len(app.query(GpuPanel)) == 8)
        assert not all_visible()  # five-line panels: a few at a time
        await pilot.press("c")
        await pilot_until(pilot, all_visible)
        assert all(p.region.height == 1 for p in app.query(GpuPanel))
        text = screen_text(app)
        assert all(f"{i} Simulated H100" in text for i in range(8)) and "°C" in text and " W" in text
        assert app.query_one(ProcessTable).region.height >= 4  # the processes still show
        await pilot.press("7")
        assert view.selected == 7 and app.query_one("#gpu-7").has_class("-selected")
        await pilot.press("c")
        await pilot_until(pilot, lambda: all(p.region.height == 5 for p in app.query(GpuPanel) if p.region.height))
