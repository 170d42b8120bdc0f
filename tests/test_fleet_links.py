"""The fleet through the ssh stand-in (tests/fleet_ssh.py): real processes per host, each with its own state dir
and simulated GPUs; hosts that refuse, do not resolve, lack gpumon, are too old, freeze, die and come back."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpumon.core.fleet.hosts import parse_hosts
from gpumon.core.fleet.model import FleetState, HostState
from gpumon.core.fleet.monitor import FleetMonitor, settled
from gpumon.core.fleet.reasons import AUTH, NOT_INSTALLED, UNKNOWN_NAME, UNREACHABLE
from tests.conftest import wait_until

STAND_IN = Path(__file__).with_name("fleet_ssh.py")


def stand_in(root: Path, gpus: int = 2) -> list[str]:
    return [sys.executable, str(STAND_IN), "--root", str(root), "--gpus", str(gpus)]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[list[FleetMonitor]]:
    """Monitors made in a test; each is stopped after it, and no process of theirs may be left."""
    made: list[FleetMonitor] = []
    yield made
    for monitor in made:
        monitor.stop()


def start(made: list[FleetMonitor], root: Path, hosts: str, **kwargs: object) -> FleetMonitor:
    monitor = FleetMonitor(parse_hosts(hosts), stand_in(root), **kwargs)  # type: ignore[arg-type]
    made.append(monitor)
    monitor.start()
    return monitor


def host(state: FleetState, name: str) -> HostState:
    return next(h for h in state.hosts if h.host.name == name)


def test_each_host_shows_its_gpus_or_its_reason_and_the_others_stay_live(tmp_path: Path, fleet) -> None:
    names = "local,gpu1,alice@gpu2,denied,nowhere,bare,old"
    monitor = start(fleet, tmp_path, names, interval=0.5, simulate=2, seed=3)
    state = monitor.wait(settled, timeout=30)
    assert [h.link for h in state.hosts] == ["live", "live", "live", "down", "down", "down", "down"]
    assert host(state, "denied").reason == AUTH and "Permission denied" in (host(state, "denied").detail or "")
    nowhere = host(state, "nowhere")  # ssh's own words, not a network failure
    assert nowhere.reason == f"{UNKNOWN_NAME} (ssh: Could not resolve hostname nowhere: Name or service not known)"
    assert host(state, "bare").reason == NOT_INSTALLED
    old = host(state, "old").reason or ""
    assert old.startswith("version mismatch: remote gpumon 0.0.9, here ")
    live = [h for h in state.hosts if h.link == "live"]
    uuids = [{d["name"] + str(d.get("gpu_util")) for d in h.gpus} for h in live]
    assert all(len(h.gpus) == 2 for h in live) and uuids[1] != uuids[2]  # seeds differ per host
    assert host(state, "gpu1").latency_ms is not None and host(state, "gpu1").version
    assert all(h.retry_at is None or h.retry_at > state.time - 60 for h in state.hosts)
    idle, total = state.totals()
    assert total == 6 and 0 <= idle <= total  # the down hosts count no GPU
    # each live remote host has its own state dir, its runs sent in its own stream
    state = monitor.wait(lambda s: all(h.runs_at for h in s.hosts if h.link == "live"), timeout=30)
    assert [h.runs_reason for h in live] == [None] * 3
    assert (tmp_path / "gpu1" / "state").is_dir() and (tmp_path / "gpu2" / "state").is_dir()


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # gone between the two calls
        return False


def _group(pid: int) -> list[psutil.Process]:
    """The stand-in's process group: ssh and what runs 'on the host'."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pid:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def test_a_frozen_host_goes_stale_a_dead_one_down_and_it_comes_back_live(tmp_path: Path, fleet) -> None:
    monitor = start(fleet, tmp_path, "a,b,c", interval=0.25, runs_every=0)
    monitor.wait(lambda s: all(h.link == "live" for h in s.hosts), timeout=30)
    link_b = monitor.links["b"]
    pid = link_b.pid  # type: ignore[attr-defined]
    assert pid is not None
    os.killpg(pid, signal.SIGSTOP)  # the host freezes: no line, no end of stream
    try:
        state = monitor.wait(lambda s: host(s, "b").link == "stale", timeout=30)
        assert host(state, "b").link == "stale" and host(state, "b").snapshot is not None  # the last one kept
        before = {n: host(state, n).snapshot["time"] for n in "ac"}  # type: ignore[index]
        state = monitor.wait(lambda s: all(host(s, n).snapshot["time"] > before[n] for n in "ac"), timeout=30)  # type: ignore[index]
        assert [host(state, n).link for n in "ac"] == ["live", "live"]  # the others go on
        (tmp_path / "b" / "down").touch()  # while it is down, new connections are refused
    finally:
        os.killpg(pid, signal.SIGKILL)
    state = monitor.wait(lambda s: host(s, "b").reason == UNREACHABLE, timeout=30)
    b = host(state, "b")
    assert b.link == "down" and "Connection refused" in (b.detail or "")
    assert [host(state, n).link for n in "ac"] == ["live", "live"]
    (tmp_path / "b" / "down").unlink()  # the host is back
    state = monitor.wait(lambda s: host(s, "b").link == "live", timeout=60)
    assert host(state, "b").link == "live" and host(state, "b").reason is None


def test_stop_leaves_no_ssh_and_no_remote_process(tmp_path: Path, fleet) -> None:
    monitor = start(fleet, tmp_path, "a,b,denied", interval=0.25, runs_every=0.25)
    monitor.wait(lambda s: sum(h.runs_at is not None for h in s.hosts) == 2, timeout=30)
    groups = [link.pid for link in monitor.links.values() if link.pid]  # type: ignore[attr-defined]
    procs = [p for pid in groups for p in _group(pid)]
    assert len(groups) == 2 and len(procs) >= 4  # per host: the stand-in ssh and gpumon under sh
    monitor.stop()
    assert wait_until(lambda: not any(_running(p) for p in procs))
    left = [p for pid in groups for p in _group(pid) if _running(p)]  # the dead, unreaped, are not left
    assert left == []
    state = monitor.state()
    assert time.time() - state.time < 5 and len(state.hosts) == 3  # still readable after stop


def test_the_app_keeps_the_fleet_for_its_views(tmp_path: Path) -> None:
    from tests.conftest import make_app

    monitor = FleetMonitor(parse_hosts("gpu1"), stand_in(tmp_path))  # not started: the app only holds it
    app = make_app(ticks=1)
    assert app.context.fleet is None
    from gpumon.tui.app import GpumonApp

    app = GpumonApp(app.sampler, fleet=monitor)
    assert app.context.fleet is monitor


def test_a_run_just_started_on_a_host_comes_with_its_stream_unasked(tmp_path: Path, fleet) -> None:
    import shlex
    import subprocess

    monitor = start(fleet, tmp_path, "gpu1", interval=0.5)
    monitor.wait(lambda s: s.hosts[0].runs_at is not None, timeout=30)
    ssh = monitor.links["gpu1"].pid  # type: ignore[attr-defined]
    assert monitor.state().hosts[0].runs == ()
    script = tmp_path / "hi.py"
    script.write_text("print('hi')\n")
    argv = [*stand_in(tmp_path), "gpu1", shlex.join(["gpumon", "launch", "script", str(script)])]
    run_id = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()[-1]
    state = monitor.wait(lambda s: bool(s.hosts[0].runs), timeout=30)
    assert [row["id"] for row in state.hosts[0].runs] == [run_id]
    assert monitor.links["gpu1"].pid == ssh  # type: ignore[attr-defined]  # one ssh carried GPUs and runs
