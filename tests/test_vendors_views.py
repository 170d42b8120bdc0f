"""The recorded AMD and Intel machines in every view, in ``snapshot --json`` and in /metrics, with the same checks
as an NVIDIA one; ``snapshot --record`` writes a tree that replays to the same readings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.core.fleet.hosts import Host
from gpumon.core.fleet.model import FleetState, HostState
from gpumon.core.gpu import open_gpu_source
from gpumon.core.model import Snapshot
from gpumon.tui.widgets.gpu_panels import GpuPanel
from gpumon.tui.widgets.process_table import ProcessTable
from tests.conftest import FrozenHost, make_app, pilot_until
from tests.fleet_data import StandInFleet, fleet_app
from tests.serve_helpers import get, start_serve, stop
from tests.test_app import row_keys, screen_text
from tests.test_fleet_view import fleet_text, open_first_host
from tests.vendor_trees import TREES, amd_cards, number

#: tree -> (--simulate N beside it, each GPU's name in order)
MACHINES = {
    "mi300x": (0, ["AMD Instinct MI300X"] * 8),
    "radeon": (0, ["AMD Radeon PRO W7900", "AMD GPU 0x164e"]),
    "intel": (0, ["Intel UHD Graphics 770", "Intel Arc B580"]),
    "nvidia-amd": (2, ["Simulated H100 80GB HBM3"] * 2 + ["AMD Instinct MI210"] * 2),
}
VIEW_KEYS = ("h", "r", "t", "d", "exclamation_mark", "g")  # fleet, runs, trials, doctor, alerts, back to GPUs


def snapshot_json(tree: str, *args: str) -> dict:
    simulate = MACHINES[tree][0]
    extra = ["--simulate", str(simulate)] if simulate else []
    env = {**os.environ, "GPUMON_SYS_ROOT": str(TREES / tree)}
    out = subprocess.run(
        [sys.executable, "-m", "gpumon", "snapshot", "--json", *extra, *args], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("tree", list(MACHINES))
async def test_every_view_shows_the_recorded_machine(tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMON_SYS_ROOT", str(TREES / tree))
    simulate, names = MACHINES[tree]
    source = open_gpu_source(simulate or None)
    devices = source.sample().devices
    app = make_app(source, ticks=3)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot_until(pilot, lambda: len(app.query(GpuPanel)) == len(names), "no GPU panels")
        panels = sorted(app.query(GpuPanel), key=lambda p: p.index)
        assert [p.device.name for p in panels if p.device] == names
        # SIMULATED marks only the simulated NVIDIA GPUs, never a recorded AMD or Intel one
        assert [p.simulated for p in panels] == [d.vendor == "nvidia" and bool(simulate) for d in devices]
        text = screen_text(app)
        if tree == "mi300x":
            assert "GFX 1420 MHz" in text and "P N/A" not in text  # amdgpu's clock; no P-state for AMD
        await pilot.press("a")  # every GPU's processes
        want = sorted(f"{p.gpu_index}:{p.pid}" for d in devices for p in d.processes)
        await pilot_until(pilot, lambda: sorted(row_keys(app.query_one(ProcessTable))) == want, "process rows")
        for key in VIEW_KEYS:
            await pilot.press(key)
            await pilot.pause()
        assert app.view == "gpus" and len(app.query(GpuPanel)) == len(names)


async def test_a_fleet_host_with_amd_gpus_shows_them_and_their_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMON_SYS_ROOT", str(TREES / "mi300x"))
    snap = Snapshot(gpu=open_gpu_source().sample(), host=FrozenHost().sample())
    state = FleetState((HostState(Host("mi1", "mi1"), "live", latency_ms=4.0, snapshot=snap.to_dict()),), 0.0)
    app = fleet_app(StandInFleet([state], interval=0))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("h")
        await pilot_until(pilot, lambda: " 0 MI300X " in fleet_text(app), "no AMD GPU in the fleet view")
        assert "2 of 8 GPUs idle" in fleet_text(app)  # idle by memory and processes, as for NVIDIA
        await open_first_host(pilot)
        table = app.screen.query_one(ProcessTable)
        await pilot.press("a")  # every GPU's processes, as on the GPUs view
        await pilot_until(pilot, lambda: len(row_keys(table)) == 6, "the host's processes")


@pytest.mark.parametrize("tree", list(MACHINES))
def test_snapshot_json_gives_each_device_its_vendor_and_its_files_numbers(tree: str) -> None:
    doc = snapshot_json(tree)
    assert [d["name"] for d in doc["devices"]] == MACHINES[tree][1]
    assert [d["index"] for d in doc["devices"]] == list(range(len(doc["devices"])))
    amd = [d for d in doc["devices"] if d["vendor"] == "amd"]
    for dev, card in zip(amd, amd_cards(TREES / tree), strict=True):
        assert dev["mem_used"] == number(card / "mem_info_vram_used")
        assert dev["gpu_util"] == number(card / "gpu_busy_percent")
        assert dev["na"]["pstate"].startswith("N/A: ")
    indexes = {d["index"] for d in doc["devices"]}
    assert all(p["gpu_index"] in indexes for p in doc["processes"])


def test_record_writes_the_files_read_and_they_replay_the_same(tmp_path: Path) -> None:
    first = snapshot_json("radeon", "--record", str(tmp_path / "rec"))
    recorded = sorted(str(p.relative_to(tmp_path / "rec")) for p in (tmp_path / "rec").rglob("*") if p.is_file())
    assert "sys/class/drm/card1/device/mem_info_vram_used" in recorded
    assert "proc/3300/fdinfo/7" in recorded and "proc/3300/cmdline" in recorded
    assert all((TREES / "radeon" / p).read_bytes() == (tmp_path / "rec" / p).read_bytes() for p in recorded)
    env = {**os.environ, "GPUMON_SYS_ROOT": str(tmp_path / "rec")}
    replay = [sys.executable, "-m", "gpumon", "snapshot", "--json"]
    again = json.loads(subprocess.run(replay, env=env, capture_output=True, text=True).stdout)
    assert again["devices"] == first["devices"]
    assert [p["pid"] for p in again["processes"]] == [p["pid"] for p in first["processes"]]


def test_metrics_label_each_gpu_with_its_vendor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMON_SYS_ROOT", str(TREES / "nvidia-amd"))
    proc, url = start_serve(tmp_path / "home", "--simulate", "2")
    try:
        families = {f.name: f for f in text_string_to_metric_families(get(url + "metrics")[2].decode())}
        used = {s.labels["gpu"]: s for s in families["gpumon_gpu_memory_used_bytes"].samples}
        vendors = {g: s.labels["vendor"] for g, s in used.items()}
        assert vendors == {"0": "nvidia", "1": "nvidia", "2": "amd", "3": "amd"}
        cards = amd_cards(TREES / "nvidia-amd")
        assert used["2"].value == number(cards[0] / "mem_info_vram_used")
        assert used["3"].labels["name"] == "AMD Instinct MI210" and used["3"].labels["uuid"].startswith("AMD-")
        util = {s.labels["gpu"]: s.value for s in families["gpumon_gpu_utilization_ratio"].samples}
        assert util["2"] == number(cards[0] / "gpu_busy_percent") / 100  # type: ignore[operator]
        power = {s.labels["gpu"]: s.value for s in families["gpumon_gpu_power_watts"].samples}
        assert power["3"] == number(next((cards[1] / "hwmon").iterdir()) / "power1_average") / 1e6  # type: ignore[operator]
        assert "3" not in {s.labels["gpu"] for s in families["gpumon_gpu_fan_ratio"].samples}  # no fan: left out
        procs = {s.labels["pid"]: s for s in families["gpumon_process_gpu_memory_bytes"].samples}
        assert procs["7777"].labels["gpu"] == "2"
    finally:
        stop(proc)
