"""Pilot tests of the OOM and leak doctor in the TUI: the runs list's and GPU panels' warnings, the
memory line and fitted line of the run detail, and the Doctor view (d / F5; c asks for a census).

Runs are recorded as the telemetry bootstrap writes them: per-rank ``step`` events with CUDA
allocated bytes (no capacity, so no machine-dependent "runs out at" projection).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from gpumon.core.doctor.report import diagnose
from gpumon.core.events import EventWriter
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunStore, write_json
from gpumon.tui.app import GpumonApp
from gpumon.tui.views.doctor.text import DoctorText
from gpumon.tui.views.doctor.view import DoctorView
from gpumon.tui.views.runs.run_detail import RunDetail
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.widgets.charts import Chart
from gpumon.tui.widgets.gpu_panels import GpuPanel
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import T0, cell, notes, open_runs, screen_text

LEAKY, HEALTHY, OOM, LIVE = (
    "ddp-1121-090000-aaaa",
    "ddp-1121-091000-bbbb",
    "script-1121-092000-cccc",
    "ddp-1121-093000-dddd",
)
GIB = 1024**3
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which "
    "1.50 GiB is free. Including non-PyTorch memory, this process has 77.64 GiB memory in use. Of the "
    "allocated memory 74.12 GiB is allocated by PyTorch, and 2.90 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
SIM_GPU0_PIDS = (5000000, 5000001)  # the simulated GPU 0's processes (SimulatedSource(seed=1))


def record(
    home: Path,
    run_id: str,
    spec: RunSpec,
    status: dict[str, Any],
    growth: float,
    steps: int = 120,
    ranks: int = 2,
    pids: tuple[int, ...] = (),
    exception: tuple[str, str] | None = None,
) -> Path:
    """A run dir: spec, status, and per rank a step event per iteration with CUDA allocated bytes."""
    run_dir = home / "runs" / run_id
    (run_dir / "logs").mkdir(parents=True)
    write_json(run_dir / "spec.json", spec.to_dict())
    write_json(run_dir / "status.json", status)
    for rank in range(ranks):
        writer = EventWriter(run_dir, f"rank{rank}")
        writer.write("proc_start", rank=rank, **({"pid": pids[rank]} if rank < len(pids) else {}))
        for step in range(1, steps + 1):
            wobble = ((step * 7919) % 13 - 6) * 4096  # deterministic noise around the trend
            alloc = 2 * GIB + rank * 64 * 1024**2 + int(step * growth * (rank + 1)) + wobble
            writer.write("step", step=step, dev="cuda:0", alloc=alloc, reserved=alloc + 256 * 1024**2)
            if rank == 0:
                writer.write("metrics", step=step, metrics={"loss": 2.0 / step})
        if exception is not None and rank == 0:
            writer.write("exception", exc_type=exception[0], message=exception[1])
        writer.close()
        (run_dir / "logs" / f"rank{rank}.log").write_text(f"rank{rank} training\n")
    return run_dir


def ended(start: float, state: str = "finished", code: int = 0, **more: Any) -> dict[str, Any]:
    return {"state": state, "created": start, "started": start + 1, "ended": start + 120, "exit_code": code, **more}


def record_oom(home: Path) -> Path:
    run_dir = record(
        home,
        OOM,
        RunSpec("script", program="train.py", args=("--batch-size", "64"), nproc=1, cwd="/tmp"),
        ended(T0 + 1200, "failed", 1, error={"message": f"torch.OutOfMemoryError: {OOM_MESSAGE}", "rank": 0}),
        growth=0,
        steps=60,
        ranks=1,
        exception=("torch.OutOfMemoryError", OOM_MESSAGE),
    )
    traceback = 'Traceback (most recent call last):\n  File "train.py", line 9\n'
    traceback += f"torch.OutOfMemoryError: {OOM_MESSAGE}\n"
    (run_dir / "logs" / "rank0.log").write_text(traceback)
    return run_dir


def record_all(home: Path, live: bool = False) -> None:
    """A leaking and a healthy finished run, the failed OOM run, and if asked a live leaking run on GPU 0."""
    record(home, LEAKY, RunSpec("ddp", nproc=2, cwd="/tmp"), ended(T0), growth=8000)
    record(home, HEALTHY, RunSpec("ddp", nproc=2, cwd="/tmp"), ended(T0 + 600), growth=0)
    record_oom(home)
    if live:
        me = psutil.Process()
        status = {"state": "running", "created": T0 + 1800, "started": T0 + 1801, "pid": me.pid}
        status.update(supervisor_pid=me.pid, supervisor_create_time=me.create_time())
        record(home, LIVE, RunSpec("ddp", nproc=2, cwd="/tmp"), status, growth=1024**2, pids=SIM_GPU0_PIDS)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def doctor_text(app: GpumonApp) -> str:
    return str(app.query_one(DoctorText).text)


async def select(pilot: Any, run_id: str) -> None:
    app = pilot.app
    app.query_one(RunTable).select_run(run_id)
    await pilot_until(pilot, lambda: app.query_one(RunsView).selected_id == run_id and app.query_one(RunTable).shown)


async def open_doctor(pilot: Any, run_id: str, expect: str) -> str:
    app = pilot.app
    await pilot.press("d")
    await pilot_until(pilot, lambda: app.view == "doctor")  # a key typed ahead waits for the view it needs
    await pilot_until(pilot, lambda: run_id in doctor_text(app) and expect in doctor_text(app))
    return doctor_text(app)


async def test_a_leaking_run_warns_in_the_list_and_its_detail(home: Path) -> None:
    record_all(home)
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_runs(pilot, 3)
        assert cell(app, LEAKY, "memory") == "▲+15.6 KiB/it"  # rank 1 grows 2 x 8000 B per step
        assert "bold red" in str(table.get_cell(LEAKY, "memory").text.spans)
        assert "bold red" in str(table.get_cell(LEAKY, "id").text.spans)
        assert "▲" not in cell(app, HEALTHY, "memory") and cell(app, HEALTHY, "memory").endswith("GiB")
        assert not table.get_cell(HEALTHY, "id").text.spans  # no warning colour
        await select(pilot, LEAKY)
        line = app.query_one("#run-memory")
        await pilot_until(pilot, lambda: line.display)
        text = str(line.render())
        assert "memory: rank 1 GPU memory leak: +15.6 KiB/iter" in text and "d: doctor" in text
        memory = app.query_one("#memory-chart", Chart)
        await pilot_until(pilot, lambda: len(memory.series) == 3)  # the detail loads in a worker, after the list's line
        fit = memory.series[-1]
        assert len(memory.series) == 3 and fit.style == "bright_red" and fit.steps[-1] == 120
        assert fit.values[-1] - fit.values[0] == pytest.approx(16000 * (fit.steps[-1] - fit.steps[0]), rel=0.02)
        assert "fit r1" in str(memory.border_subtitle)
        await select(pilot, HEALTHY)
        await pilot_until(pilot, lambda: not line.display)
        await pilot_until(pilot, lambda: len(memory.series) == 2)  # the detail loads in a worker: slow under load


async def test_d_opens_the_doctor_on_the_selected_run(home: Path) -> None:
    record_all(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, 3)
        assert "d" in app.screen.active_bindings
        await select(pilot, LEAKY)
        text = await open_doctor(pilot, LEAKY, "memory per iteration")
        assert "memory leak: +15.6 KiB/iter" in text  # the headline
        assert "rank 0: GPU memory leak: +7.8 KiB/iter" in text and "rank 1: GPU memory leak: +15.6 KiB/iter" in text
        assert "c" not in app.screen.active_bindings or app.screen.active_bindings["c"].binding.action == "census"
        await pilot.press("r")
        await select(pilot, OOM)
        text = await open_doctor(pilot, OOM, "what to change")
        assert text.index("failure") < text.index("what to change")
        assert "script-1121-092000-cccc  failed, exit code 1" in text
        diagnosis = diagnose(RunStore().resolve(OOM))
        assert diagnosis.failure is not None and diagnosis.failure.kind == "cuda_oom"
        assert diagnosis.failure.title in text
        titles = [a.title for a in diagnosis.advice]
        assert len(titles) >= 2
        assert [text.index(f"{n}. {t}") for n, t in enumerate(titles, 1)] == sorted(
            text.index(f"{n}. {t}") for n, t in enumerate(titles, 1)
        )
        assert "leak" not in text.split("failure")[0]  # a flat memory: no warning
        await pilot.press("alt+r")
        await pilot_until(pilot, lambda: app.view == "runs")
        await pilot.press("alt+d")
        await pilot_until(pilot, lambda: app.view == "doctor")


async def test_d_with_no_selection_diagnoses_the_newest_run(home: Path) -> None:
    record_all(home)
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("d")  # from the GPUs view, before the Runs view has listed anything
        await pilot_until(pilot, lambda: OOM in doctor_text(app))


async def test_no_runs_says_how_to_get_one(home: Path) -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("d")
        await pilot_until(pilot, lambda: "No run to diagnose" in doctor_text(app))


async def test_c_asks_a_live_run_for_a_census_and_shows_it_pending(home: Path) -> None:
    record_all(home, live=True)
    flag = home / "runs" / LIVE / "control" / "census"
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, 4)
        await pilot_until(pilot, lambda: app.query_one(RunsView).summaries[LIVE].leak is not None)
        assert not flag.exists()  # the run's supervisor asks by itself, not the app (issue 12)
        await select(pilot, LIVE)
        await open_doctor(pilot, LIVE, "memory per iteration")
        await pilot.press("c")
        await pilot_until(pilot, flag.exists)
        assert flag.read_text().strip() == "20"
        await pilot_until(pilot, lambda: "census pending" in doctor_text(app))
        assert any(f"Asked {LIVE} for a tensor census" in n for n in notes(app))
        await pilot.press("r")
        # r may be handled after press returns: unwaited, d would find Doctor still open and r close it later
        await pilot_until(pilot, lambda: app.view == "runs", "r never went back to Runs", 30)
        await select(pilot, LEAKY)
        await open_doctor(pilot, LEAKY, "memory per iteration")
        await pilot.press("c")
        await pilot_until(
            pilot, lambda: any(f"{LEAKY} is finished: a census needs a live run" in n for n in notes(app))
        )


async def test_readonly_asks_for_no_census(home: Path) -> None:
    record_all(home, live=True)
    control = home / "runs" / LIVE / "control"
    app = make_app(gpus=1, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, 4)
        await pilot_until(pilot, lambda: app.query_one(RunsView).summaries[LIVE].leak is not None)
        await select(pilot, LIVE)
        await open_doctor(pilot, LIVE, "memory per iteration")
        await pilot.press("c")
        await pilot_until(pilot, lambda: any("Read-only" in n for n in notes(app)), "c was never refused", 30)
        # nothing to wait for that is absent: the key was handled (its note), and a census asked anyway would be a
        # worker writing the control file; once every worker is done, none can still write it
        await pilot.pause()
        await pilot_until(pilot, lambda: all(w.is_finished for w in app.workers), "a worker never ended")
        assert not control.exists()
        assert "census pending" not in doctor_text(app)


async def test_gpu_panel_warns_while_a_leaking_run_is_on_it(home: Path) -> None:
    record_all(home, live=True)
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        gpu0, gpu1 = app.query_one("#gpu-0", GpuPanel), app.query_one("#gpu-1", GpuPanel)
        await pilot_until(pilot, lambda: gpu0.has_class("-leak"))
        assert "run ddp-dddd: memory leak +2.0 MiB/it" in str(gpu0.border_title)
        assert "run ddp-dddd: memory leak" in screen_text(app)
        assert not gpu1.has_class("-leak") and not gpu1.has_class("-growing") and "▲" not in str(gpu1.border_title)
        title = gpu0.border_title
        app.apply(app.sampler.latest)  # type: ignore[arg-type]  # a tick with the same warning: no new title
        assert gpu0.has_class("-leak") and gpu0.border_title is title
        status = home / "runs" / LIVE / "status.json"
        write_json(status, {**ended(T0 + 1800), "exit_code": 0})
        await pilot_until(pilot, lambda: not gpu0.has_class("-leak"))
        assert "▲" not in str(gpu0.border_title) and gpu0.warning is None


async def test_a_healthy_run_warns_nowhere(home: Path) -> None:
    record(home, HEALTHY, RunSpec("ddp", nproc=2, cwd="/tmp"), ended(T0), growth=0)
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_runs(pilot, 1)
        await select(pilot, HEALTHY)
        # the warnings are absent: wait instead until the healthy run's detail is drawn (its info line on screen)
        detail = app.query_one(RunDetail)
        await pilot_until(
            pilot,
            lambda: (
                detail.summary is not None
                and detail.summary.record.id == HEALTHY
                and str(app.query_one("#run-info").render()).splitlines()[0][:30] in screen_text(app)
            ),
            "the healthy run's detail never showed",
        )
        assert not app.query_one("#run-memory").display
        assert "▲" not in screen_text(app)
        text = await open_doctor(pilot, HEALTHY, "memory per iteration")
        assert "no problem seen" in text and "rank 0: GPU memory ok" in text
        assert not any(p.warning for p in app.query(GpuPanel))


def test_doctor_view_on_an_oom_run_120x40(snap_compare, home: Path) -> None:
    record_oom(home)

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await pilot.press("d")
        await pilot_until(pilot, lambda: "what to change" in doctor_text(app))
        assert isinstance(app.query_one(DoctorView), DoctorView)
        await pilot_until(pilot, lambda: "what to change" in screen_text(app), "the advice was never drawn")

    assert snap_compare(make_app(gpus=2), terminal_size=(120, 40), run_before=run_before)
