"""SVG snapshots of the main screens (simulated GPUs, frozen host).

Update after an intended change of the look: pytest tests/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

from dataclasses import replace

from gpumon.core.gpu.simulated import SimulatedSource
from gpumon.core.model import GpuSample
from tests.conftest import make_app, no_gpu_app


class RealLookingProcesses(SimulatedSource):
    """Simulated GPUs whose processes are not marked simulated: T asks (a simulated one is refused at once)."""

    def sample(self) -> GpuSample:
        sample = super().sample()
        devices = tuple(
            replace(d, processes=tuple(replace(p, simulated=False) for p in d.processes)) for d in sample.devices
        )
        return replace(sample, devices=devices)


def test_main_screen_80x24(snap_compare) -> None:
    assert snap_compare(make_app(gpus=2), terminal_size=(80, 24))


def test_wide_screen_eight_gpus(snap_compare) -> None:
    assert snap_compare(make_app(gpus=8), terminal_size=(200, 50))


def test_all_processes_sorted_by_pid(snap_compare) -> None:
    assert snap_compare(make_app(gpus=4), press=["a", "s", "s"], terminal_size=(120, 40))


def test_no_gpu_screen(snap_compare) -> None:
    assert snap_compare(no_gpu_app(), terminal_size=(80, 24))


def test_help_screen(snap_compare) -> None:
    assert snap_compare(make_app(gpus=2), press=["question_mark"], terminal_size=(100, 32))


def test_signal_confirmation(snap_compare) -> None:
    app = make_app(RealLookingProcesses(2, seed=1))
    assert snap_compare(app, press=["tab", "T"], terminal_size=(100, 32))
