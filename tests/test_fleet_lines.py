"""What the Fleet view says about a host, as plain values (core/fleet/lines.py)."""

from __future__ import annotations

import pytest

from gpumon.core.fleet.hosts import parse_host
from gpumon.core.fleet.lines import host_lines, link_words, short_command, short_gpu_name
from gpumon.core.fleet.model import HostState
from tests.fleet_data import STALE_SINCE, snapshots

pytestmark = pytest.mark.usefixtures("utc")
HOST = parse_host("gpu1")


@pytest.mark.parametrize(
    ("name", "short"),
    [("NVIDIA H100 80GB HBM3", "H100 80GB"), ("NVIDIA GeForce RTX 4090", "RTX 4090"), (None, "N/A")],
)
def test_short_gpu_names(name: str | None, short: str) -> None:
    assert short_gpu_name(name) == short


@pytest.mark.parametrize(
    ("command", "short"),
    [
        ("python -m torch.distributed.run --nproc-per-node 8 train.py", "torch.distributed.run"),
        ("/usr/bin/python3 /home/a/train_llm.py --bf16", "train_llm.py"),
        ("/opt/bin/llama-server -m x", "llama-server"),
        (None, None),
    ],
)
def test_short_commands(command: str | None, short: str | None) -> None:
    assert short_command(command) == short


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (HostState(HOST), "connecting"),
        (HostState(HOST, "connecting", reason="host unreachable"), "connecting · last: host unreachable"),
        (HostState(HOST, "live", latency_ms=23.4), "live 23 ms"),
        (HostState(HOST, "stale", since=STALE_SINCE), "stale since 14:02:11"),
        (HostState(HOST, "down", reason="gpumon is not installed there: pip install gpumon"),
         "gpumon is not installed there: pip install gpumon"),
    ],
)  # fmt: skip
def test_link_in_words(state: HostState, words: str) -> None:
    assert link_words(state) == words


def test_runs_are_matched_to_processes_by_pid_and_a_lost_gpu_is_not_idle() -> None:
    doc = snapshots(4, 1, 1, "gpu1")[-1]
    doc["devices"][3]["state"] = "lost"
    runs = ({"id": "ddp-1122-140211-c132", "pid": 5_000_010}, {"id": "old-run"})
    lines = host_lines(HostState(HOST, "live", snapshot=doc, runs=runs))
    assert [g.run for g in lines.gpus] == [None, "ddp-1122-140211-c132", None, None]
    assert (lines.busy, lines.idle) == (4, 0)
    assert lines.gpus[0].user == "researcher" and lines.gpus[0].command == "torch.distributed.run"
