"""``gpumon --ray``: a real Ray cluster of 2 (then 3) nodes on this machine, each node's GPUs simulated with
its own seed, read by one gpumon actor per node. Ray's start-up is slow here: few tests, one cluster."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from gpumon.core.fleet.ray_source import RayFleet, settled
from tests.conftest import wait_until

pytest.importorskip("ray")
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    from ray.cluster_utils import Cluster

    saved = {key: os.environ.get(key) for key in RAY_ENV}
    os.environ.update(RAY_ENV)
    # No dashboard: gpumon reads the GCS, and its start is CPU that Ray's fixed 30 s wait for a node's
    # registration ("The current node timed out during startup") could not spare beside CPU hogs.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    try:
        yield cluster
    finally:
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **RAY_ENV}
    return subprocess.run([sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, env=env, timeout=120)


def gpu_ids(snapshot: dict) -> list[str]:
    return [d["uuid"] for d in snapshot["devices"]]


def agents() -> list[psutil.Process]:
    """The gpumon actors' worker processes (Ray titles them ray::NodeAgent)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any("NodeAgent" in part for part in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def test_gpumon_fleet_ray_json_shows_every_nodes_own_gpus(cluster) -> None:
    # The command prints once every node has answered; a node whose next answer is 2 intervals late reads
    # stale. At 0.5 s a loaded machine made that likely (CI: "link not live"); 2 s leaves room for a slow
    # actor and still fails a node that never answers.
    done = gpumon("--interval", "2", "fleet", "--ray", cluster.address, "--json", "--simulate", "2", "--seed", "7")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    hosts = doc["hosts"]
    links = [(h["name"], h["link"], h["reason"]) for h in hosts]
    assert len(hosts) == 2 and len({h["name"] for h in hosts}) == 2, links
    assert all(h["link"] == "live" and h["name"].startswith("ray:") for h in hosts), links
    assert all(isinstance(h["latency_ms"], float) for h in hosts)
    ip = cluster.address.rpartition(":")[0]
    assert {h["address"] for h in hosts} == {ip}  # both nodes live on this machine
    snaps = [h["snapshot"] for h in hosts]
    assert all(s["simulated"] and len(s["devices"]) == 2 for s in snaps)
    # Seeds 7 and 8: each node's own simulated GPUs, not one sample twice.
    assert set(gpu_ids(snaps[0])).isdisjoint(gpu_ids(snaps[1]))
    assert doc["gpus"] == 4


def test_a_node_that_leaves_is_down_with_its_reason_while_the_others_stay_live(cluster) -> None:
    extra = cluster.add_node(num_cpus=1)
    fleet = RayFleet(cluster.address, interval=0.5, simulate=1, seed=3)
    fleet.start()
    try:
        states = fleet.wait(lambda s: settled(s) and len(s) == 3 and all(h.link == "live" for h in s), 90)
        assert [h.link for h in states] == ["live"] * 3, [(h.host.name, h.link, h.reason) for h in states]
        assert len({gpu_ids(h.snapshot)[0] for h in states if h.snapshot}) == 3
        assert wait_until(lambda: len(agents()) == 3, timeout=30)  # one actor per node, nothing else started

        agents()[0].kill()  # an actor that dies: its node is down with the reason, then gets a new actor
        states = fleet.wait(lambda s: any(h.link == "down" for h in s), 30)
        failed = [h for h in states if h.link == "down"]
        assert len(failed) == 1 and (failed[0].reason or "").startswith("its gpumon actor failed: The actor died")
        assert [h.link for h in states].count("live") == 2
        states = fleet.wait(lambda s: all(h.link == "live" for h in s), 30)
        assert [h.link for h in states] == ["live"] * 3

        before = {h.host.name: h.snapshot["time"] for h in states if h.snapshot}

        cluster.remove_node(extra)
        states = fleet.wait(lambda s: sum(h.link == "down" for h in s) == 1, 60)
        down = [h for h in states if h.link == "down"]
        assert len(down) == 1 and "left the Ray cluster" in (down[0].reason or ""), [
            (h.host.name, h.link, h.reason) for h in states
        ]
        # The two others go on answering: their snapshots are newer than before the removal.
        states = fleet.wait(
            lambda s: all(h.link == "live" and h.snapshot["time"] > before[h.host.name] for h in s if h.link != "down"),
            30,
        )
        assert [h.link for h in states].count("live") == 2
    finally:
        fleet.stop()
    assert wait_until(lambda: not agents(), timeout=30), "gpumon's actors outlived stop()"


def test_no_cluster_is_one_line_and_exit_2_and_the_reason_in_the_state() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    done = gpumon("fleet", "--ray", address)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"gpumon: error: no Ray cluster at {address}: start one with `ray start --head` (connection refused)"
    ]
    fleet = RayFleet(address, interval=0.5)
    fleet.start()
    try:
        (state,) = fleet.wait(lambda s: s[0].link == "down", 60)
    finally:
        fleet.stop()
    assert state.link == "down" and state.host.name == f"ray:{address}"
    assert state.reason == f"no Ray cluster at {address}: start one with `ray start --head` (connection refused)"
