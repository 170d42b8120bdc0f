"""A GPU held and idle: a run's process keeping GPU memory while its GPU does nothing, for a sustained time.
NVML is faked (no GPU here) with pynvml's real call names and errors (tests/fake_nvml.py)."""

from __future__ import annotations

import os
from pathlib import Path

from gpumon.core.doctor.slow import slow_findings
from gpumon.core.events import EventWriter
from gpumon.core.gpu.idle import IDLE_AFTER_S, IdleWatch
from gpumon.core.gpu.nvml import NvmlSource
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample
from gpumon.core.runs.reading.feeding import Feeding
from gpumon.core.runs.reading.summary import run_warnings
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.supervision.gpu_idle import GpuIdleCheck
from gpumon.tui.feeds import SampleReady
from gpumon.tui.widgets.gpu_panels import GpuPanel
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import make_app
from tests.fake_nvml import GIB, FakeDevice, FakeNvml, proc


def sample(t: float, util: float, held: int = 3 * GIB, pid: int = 4242) -> GpuSample:
    process = GpuProcess(0, pid, held, None, "compute")
    return GpuSample("nvml", (GpuDevice(0, "H100", "GPU-0", gpu_util=util, processes=(process,)),), t)


def test_memory_held_on_an_idle_gpu_is_marked_only_after_the_rules_time() -> None:
    watch = IdleWatch()
    assert watch.update(sample(0.0, 0.0)) == {}
    assert watch.update(sample(IDLE_AFTER_S - 1, 0.0)) == {}  # a long eval, a checkpoint: not yet
    [held] = watch.update(sample(IDLE_AFTER_S + 1, 0.0)).values()
    assert held.pid == 4242 and held.gpu == 0 and held.held == 3 * GIB
    assert "holds 3.0 GiB on GPU 0 at 0% utilisation for 5m" in held.describe()
    assert watch.update(sample(IDLE_AFTER_S + 2, 35.0)) == {}  # it works again: the clock starts over
    assert watch.update(sample(IDLE_AFTER_S + 3, 0.0)) == {}
    # a process of another user, a sliver of memory: not ours to mark, not worth a word
    assert IdleWatch(after_s=0).update(sample(1.0, 0.0), pids={1}) == {}
    assert IdleWatch(after_s=0).update(sample(1.0, 0.0, held=1024**2)) == {}


def test_the_supervisors_look_records_it_alerts_once_and_the_run_row_says_so(tmp_path: Path) -> None:
    pid = os.getpid()
    device = FakeDevice(gpu_util=0, compute=[proc(pid, 6 * GIB)])
    check = GpuIdleCheck(lambda: NvmlSource(nvml=FakeNvml([device])), every_s=0.0)
    check.watch = IdleWatch(after_s=0.0)
    (tmp_path / "events").mkdir()
    events, alerts = EventWriter(tmp_path, "launcher"), []
    for now in (1.0, 2.0):
        check.report(now, {pid: 0}, events, lambda text, kind: alerts.append((kind, text)))
    [(kind, text)] = alerts  # once per run
    assert kind == "gpu_idle" and text.startswith("GPU held idle: rank 0 (pid ") and "6.0 GiB on GPU 0" in text
    fold = RunTelemetry(tmp_path, use_summary=False)
    fold.update()
    assert run_warnings(fold) == (text,)
    device.gpu_util = 80  # back at work: the warning goes
    check.report(3.0, {pid: 0}, events, lambda text, kind: alerts.append((kind, text)))
    fold.update()
    assert run_warnings(fold) == () and len(alerts) == 1


async def test_the_gpus_view_marks_the_runs_process_in_its_run_column() -> None:
    pid = os.getpid()
    source = NvmlSource(nvml=FakeNvml([FakeDevice(gpu_util=0, compute=[proc(pid, 4 * GIB)])]))
    app = make_app(source, ticks=2)
    async with app.run_test(size=(160, 45)) as pilot:
        app.idle_watch = IdleWatch(after_s=0.0)
        app.context.run_pids = {pid: "script-1125-031500-ab12"}
        app.post_message(SampleReady(app.sampler.sample_once()))
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert wait_label(table).startswith("⏸"), table.labels
        panel = app.query_one("#gpu-0", GpuPanel)
        assert panel.warning is not None and "GPU held idle for" in panel.warning[1], panel.warning


def wait_label(table: ProcessTable) -> str:
    return next(iter(table.labels.values()), "")


def test_an_input_bound_ranks_gpu_utilisation_is_said_beside_its_wait(tmp_path: Path) -> None:
    """The GPU of a rank that waits for its data idles meanwhile: the supervisor's looks record its mean
    utilisation (``gpu_use``), and the doctor's input-bound line joins it."""
    pid = os.getpid()
    device = FakeDevice(gpu_util=30, compute=[proc(pid, 6 * GIB)])
    check = GpuIdleCheck(lambda: NvmlSource(nvml=FakeNvml([device])), every_s=0.0)
    (tmp_path / "events").mkdir()
    events = EventWriter(tmp_path, "launcher")
    check.report(1.0, {pid: 1}, events, lambda text, kind: None)
    device.gpu_util = 10
    check.report(2.0, {pid: 1}, events, lambda text, kind: None)  # the mean of the looks: 20%
    device.gpu_util = 12
    check.report(3.0, {pid: 1}, events, lambda text, kind: None)  # 17.3%: within USE_STEP, nothing written
    rank1 = EventWriter(tmp_path, "rank1")
    for step in range(40):  # 0.3 s a step, 0.2 s of it in the DataLoader's __next__
        rank1.write("step", step=step, t=1000.0 + 0.3 * step, wait=0.2)
    rank1.write("dataloader", num_workers=0, batch_size=16)
    fold = RunTelemetry(tmp_path, use_summary=False)
    fold.update()
    assert fold.feeding.ranks[1].gpu == (0, 20.0)
    [finding] = slow_findings(fold)
    assert finding.text == (
        "input-bound: 67% of each step waits for data (DataLoader num_workers=0, batch 16); its GPU 0 is 20% busy"
    )
    assert Feeding.from_state(fold.feeding.to_state()).ranks[1].gpu == (0, 20.0)  # kept in the summary


def test_a_rank_stopped_inside_its_dataloader_is_not_called_input_bound(tmp_path: Path) -> None:
    """A SIGSTOP (or a stall) inside ``__next__`` is all 'wait' to the wrapper: the interval is a pause, left out."""
    (tmp_path / "events").mkdir()
    rank0, t = EventWriter(tmp_path, "rank0"), 1000.0
    for step in range(1, 120):
        pause = step == 60  # stopped for 12 s inside the DataLoader's __next__
        t += 12.0 if pause else 0.1
        rank0.write("step", step=step, t=t, wait=11.95 if pause else 0.01)
    rank0.write("dataloader", num_workers=0, batch_size=1)
    fold = RunTelemetry(tmp_path, use_summary=False)
    fold.update()
    share = fold.feeding.wait_share()
    assert share is not None and share < 0.2, share
    assert slow_findings(fold) == []
