"""A trial's GPU memory on its own node: Tune's pid, hostname and node_ip matched against the fleet's snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gpumon.core.events import EventWriter
from gpumon.core.fleet.combined import CombinedFleet
from gpumon.core.fleet.hosts import Host
from gpumon.core.fleet.model import HostState
from gpumon.core.fleet.trial_gpu import pid_memory, trial_gpu_memory
from gpumon.core.format import size
from gpumon.core.runs.reading.experiments import ExperimentsMonitor
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import screen_text
from tests.test_trials_view import cell, open_trials, select
from tests.trials_data import LIVE, record_live

GIB = 1024**3


@dataclass(frozen=True)
class Place:
    id: str
    pid: int | None
    hostname: str | None = None
    node_ip: str | None = None


def node(name: str, ip: str, hostname: str, processes: list[dict], link: str = "live") -> HostState:
    snapshot = {"host": {"hostname": hostname}, "devices": [], "processes": processes}
    return HostState(Host(name, ip), link, snapshot=snapshot)


def proc(pid: int, gpu: int, gib: int) -> dict:
    return {"pid": pid, "gpu_index": gpu, "used_memory": gib * GIB}


FLEET = (
    node("ray:gpu7", "10.0.0.7", "gpu7", [proc(4242, 0, 3), proc(4242, 1, 1), proc(99, 2, 5)]),
    node("gpu8", "gpu8", "gpu8", [proc(4343, 0, 2)]),  # an ssh host: its address is a name, not the IP
    node("ray:gpu9", "10.0.0.9", "gpu9", [proc(4444, 0, 6)], link="down"),  # gone: its snapshot is history
)


def test_pid_memory_sums_a_process_over_its_gpus_and_skips_unknown_memory() -> None:
    processes = [proc(1, 0, 1), proc(1, 1, 2), {"pid": 2, "gpu_index": 0, "used_memory": None}]
    assert pid_memory(processes) == {1: 3 * GIB}


def test_each_trial_is_matched_on_its_own_node() -> None:
    local = {4242: 7 * GIB, 500: 1 * GIB}  # this machine has a process 4242 too
    trials = [
        Place("remote", 4242, "gpu7", "10.0.0.7"),  # node_ip finds gpu7: 3 + 1 GiB, not the local 7
        Place("by-name", 4343, "gpu8", "192.168.1.8"),  # the ssh host is known by name
        Place("here", 500, "trainbox", "10.0.0.1"),  # this machine's trial: the local sample
        Place("unsaid", 500),  # no node named (an old callback): this machine
        Place("elsewhere", 4242, "gpu5", "10.0.0.5"),  # a node the fleet does not show: unknown, never local
        Place("gone", 4444, "gpu9", "10.0.0.9"),  # its node is down
        Place("no-pid", None, "gpu7", "10.0.0.7"),
    ]
    assert trial_gpu_memory(trials, local, FLEET, here="trainbox") == {
        "remote": 4 * GIB,
        "by-name": 2 * GIB,
        "here": 1 * GIB,
        "unsaid": 1 * GIB,
    }


def test_nodes_sharing_an_address_are_all_searched() -> None:
    """Several Ray nodes on one machine share its IP (and its GPUs): the pid is looked for in each."""
    twins = (node("ray:vm/aa", "10.0.0.3", "vm", [proc(1, 0, 1)]), node("ray:vm/bb", "10.0.0.3", "vm", [proc(2, 0, 2)]))
    found = trial_gpu_memory([Place("t", 2, "vm", "10.0.0.3")], {}, twins, here="other")
    assert found == {"t": 2 * GIB}


def test_the_callbacks_node_fields_reach_the_trial_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    run_dir = record_live(tmp_path)
    writer = EventWriter(run_dir, "tune")
    writer.write(
        "trial_result",
        trial_id="f00d1_00002",
        iteration=2,
        trial_pid=4242,
        trial_hostname="gpu7",
        trial_node_ip="10.0.0.7",
        metrics={"loss": 0.9},
    )
    writer.close()
    monitor = ExperimentsMonitor()
    monitor.refresh()
    row = monitor.snapshot(LIVE).by_id["f00d1_00002"]
    assert (row.pid, row.hostname, row.node_ip) == (4242, "gpu7", "10.0.0.7")


class Nodes:
    """The fleet's states as a source gives them (plain data: the Ray path itself is tested in test_ray_fleet)."""

    def state(self) -> tuple[HostState, ...]:
        return FLEET

    def start(self) -> None: ...

    def stop(self) -> None: ...


async def test_the_trials_view_shows_gpu_memory_of_a_trial_on_another_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    run_dir = record_live(tmp_path)
    writer = EventWriter(run_dir, "tune")
    writer.write(
        "trial_result", trial_id="f00d1_00002", iteration=2, trial_pid=4242, trial_hostname="gpu7",
        trial_node_ip="10.0.0.7", metrics={"loss": 0.9},
    )  # fmt: skip
    writer.close()
    app = make_app(gpus=1)
    app.context.fleet = CombinedFleet([Nodes()])
    async with app.run_test(size=(140, 40)) as pilot:
        table = await open_trials(pilot, 3)
        await pilot_until(pilot, lambda: cell(table, "f00d1_00002", "gpu") == size(4 * GIB))
        assert app.context.snapshot is not None
        local = next(p for p in app.context.snapshot.gpu.devices[0].processes if p.pid == 5_000_000)
        assert cell(table, "f00d1_00001", "gpu") == size(local.used_memory)  # this machine's trial, as before
        await select(pilot, "f00d1_00002")
        assert f"pid 4242 on gpu7 · GPU {size(4 * GIB)}" in screen_text(app)
