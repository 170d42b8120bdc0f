"""``gpumon snapshot --json --watch``: JSON Lines as they come, ended quietly by a closed pipe or Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import gpumon
from tests.test_cli import gpumon_run

EXIT_S = 120  # a generous deadline for the stream to end (10 s ran out at load 6-7 on two cores)
WATCH = [sys.executable, "-m", "gpumon", "snapshot", "--json", "--watch", "--simulate", "2", "--interval", "0.25"]


def _start(*extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen([*WATCH, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_watch_prints_one_document_per_line_as_it_goes_and_ctrl_c_ends_it_with_exit_0() -> None:
    proc = _start()
    assert proc.stdout is not None and proc.stderr is not None
    try:
        docs = [json.loads(proc.stdout.readline()) for _ in range(3)]  # read while it runs: each line flushed
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=EXIT_S) == 0
    assert proc.stderr.read() == ""
    for doc in docs:
        assert doc["schema"] == 1 and doc["version"] == gpumon.__version__ and doc["fields"] == "full"
        assert len(doc["devices"]) == 2 and doc["simulated"] is True and "per_cpu" in doc["host"]
    times = [doc["time"] for doc in docs]
    assert times == sorted(times) and len(set(times)) == 3  # a new sample on every line


def test_a_closed_pipe_ends_the_stream_quietly_like_head_1() -> None:
    watch = _start()
    assert watch.stdout is not None and watch.stderr is not None
    head = subprocess.run(["head", "-1"], stdin=watch.stdout, capture_output=True, text=True, check=True)
    watch.stdout.close()  # only head held the pipe's read end: now nobody does
    assert watch.wait(timeout=EXIT_S) == 0
    assert watch.stderr.read() == ""  # no traceback, no "Exception ignored"
    assert json.loads(head.stdout)["schema"] == 1


def _first(*extra: str) -> dict[str, Any]:
    proc = _start(*extra)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=EXIT_S) == 0  # ended by Ctrl-C as a stream should
    doc: dict[str, Any] = json.loads(line)
    doc["_bytes"] = len(line)
    return doc


def test_fleet_fields_are_a_smaller_subset_of_the_full_document() -> None:
    full, fleet = _first(), _first("--fields", "fleet")
    assert fleet["fields"] == "fleet" and fleet["_bytes"] < 0.8 * full["_bytes"]
    assert "sm_clock" not in fleet["devices"][0] and "per_cpu" in fleet["host"]  # what a host's screen draws, no more
    for small, big in ((fleet, full), (fleet["host"], full["host"]), (fleet["devices"][0], full["devices"][0])):
        assert set(small) - {"fields", "_bytes"} <= set(big) | {"sent"}  # the same keys, fewer of them
    busy = fleet["devices"][0]
    assert busy["gpu_util"] is not None and busy["mem_total"] == full["devices"][0]["mem_total"]
    assert {p["pid"] for p in fleet["processes"]} == {p["pid"] for p in full["processes"]}


def test_watch_and_fields_without_json_is_one_line_and_exit_2() -> None:
    for args in (["snapshot", "--watch"], ["snapshot", "--fields", "fleet"]):
        result = gpumon_run(*args, timeout=EXIT_S)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.count("\n") == 1 and "add --json" in result.stderr
    result = gpumon_run("snapshot", "--json", "--watch", "--interval", "0.01", timeout=EXIT_S)
    assert result.returncode == 2 and "at least 0.25" in result.stderr


def test_a_fleet_line_reads_back_as_the_snapshot_a_hosts_screen_draws() -> None:
    """Enter on a fleet host draws ``Snapshot.from_dict`` of the compact line: it said "unreadable snapshot
    (GpuProcess.__init__() missing ... 'kind')" on every real link."""
    from gpumon.core.model import Snapshot

    full, fleet = _first(), _first("--fields", "fleet")
    snap = Snapshot.from_dict(fleet)
    assert len(snap.host.per_cpu) == len(full["host"]["per_cpu"]) and snap.host.swap_total == full["host"]["swap_total"]
    assert [d.uuid for d in snap.gpu.devices] == [d["uuid"] for d in full["devices"]]
    assert {p.kind for d in snap.gpu.devices for p in d.processes} == {p["kind"] for p in full["processes"]}
