"""The GPUs and Fleet views at 80x24 (issue 50, item 9): numbers whole in the panels, the Fleet hint whole, and
GPUs the list cannot show said, with how to see them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from gpumon.core.gpu.simulated import SimulatedSource
from gpumon.core.model import HostSample
from gpumon.core.sampler import Sampler
from gpumon.tui.app import GpumonApp
from tests.conftest import FrozenHost, make_app, pilot_until
from tests.test_cramped import screen_lines


class BusyHost(FrozenHost):
    """A loaded host with a terabyte of memory: the host panel's widest values."""

    def sample(self) -> HostSample:
        return dataclasses.replace(
            super().sample(), load=(13.53, 12.87, 11.02), mem_used=512 * 1024**3, mem_total=1007 * 1024**3
        )


@pytest.mark.parametrize("width", [80, 44])
async def test_the_host_panel_keeps_each_load_figure_whole(width: int) -> None:
    sampler = Sampler(SimulatedSource(4, seed=1), BusyHost(), interval=1.0)
    for _ in range(5):
        sampler.sample_once()
    app = GpumonApp(sampler)
    async with app.run_test(size=(width, 24)) as pilot:
        await pilot_until(pilot, lambda: any("load" in line for line in screen_lines(app)), "no host panel")
        cpu = next(line for line in screen_lines(app) if "load" in line)
        mem = next(line for line in screen_lines(app) if "GiB" in line and "MEM" in line)
        loads = re.findall(r"load ((?:\S+ ?)+?)\s{2,}", cpu + "  ")[0].split()
        assert loads and all(re.fullmatch(r"\d+\.\d\d", v) for v in loads), cpu
        assert loads == ["13.53", "12.87", "11.02"][: len(loads)], cpu  # the 1-minute load first, dropped last
        assert len(loads) == (3 if width == 80 else 2), cpu  # 44 columns: the 15-minute load left out whole
        assert "512.0/1007.0 GiB" in mem, mem


async def test_hidden_gpus_are_counted_with_how_to_see_them() -> None:
    app = make_app(gpus=4)
    async with app.run_test(size=(80, 24)) as pilot:
        said = "▼ 2 more GPUs below · c compact"
        await pilot_until(pilot, lambda: any(said in line for line in screen_lines(app)), "\n".join(screen_lines(app)))
        await pilot.press("c")  # compact: all four show, and the count goes
        await pilot_until(pilot, lambda: not any("more GPU" in line for line in screen_lines(app)))
        shown = "\n".join(screen_lines(app))
        assert all(f" {i} Simulated" in shown for i in range(4)), shown


async def test_no_count_when_every_gpu_shows() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: any("GPU 1" in line for line in screen_lines(app)))
        assert not any("more GPU" in line for line in screen_lines(app))


async def test_the_fleet_hint_shows_the_config_path_whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GPUMON_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    app = make_app(gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("h")
        await pilot_until(pilot, lambda: "This machine only" in "\n".join(screen_lines(app)), "no hint")
        shown = "\n".join(screen_lines(app))
        assert "~/.config/gpumon/config.toml" in shown and "…" not in shown.split("This machine only")[1][:200], shown
