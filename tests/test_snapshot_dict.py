"""Snapshot.from_dict: another host's `gpumon snapshot --json` document becomes a Snapshot again."""

from __future__ import annotations

import json

import pytest

from gpumon.core.gpu import open_gpu_source
from gpumon.core.model import Snapshot
from tests.conftest import FrozenHost


def simulated_snapshot(gpus: int = 4, seed: int = 3) -> Snapshot:
    source = open_gpu_source(gpus, seed)
    return Snapshot(gpu=source.sample(), host=FrozenHost().sample())


def test_round_trip_through_json_gives_the_same_snapshot() -> None:
    snap = simulated_snapshot()
    doc = json.loads(json.dumps(snap.to_dict()))
    back = Snapshot.from_dict(doc)
    assert back == snap
    assert back.to_dict() == snap.to_dict()
    assert [len(d.processes) for d in back.gpu.devices] == [len(d.processes) for d in snap.gpu.devices]


def test_unknown_keys_are_ignored_and_missing_ones_take_defaults() -> None:
    doc = simulated_snapshot(gpus=1).to_dict()
    doc["devices"][0]["new_field"] = 1
    del doc["devices"][0]["fan"]
    doc["host"]["new_field"] = "x"
    back = Snapshot.from_dict(doc)
    assert back.gpu.devices[0].fan is None and back.gpu.devices[0].name == "Simulated H100 80GB HBM3"


@pytest.mark.parametrize("doc", [{}, {"host": {}}, {"host": {"hostname": "a"}, "devices": [{}]}])
def test_a_document_that_is_not_a_snapshot_is_a_value_error(doc: dict) -> None:
    with pytest.raises(ValueError, match="not a gpumon snapshot"):
        Snapshot.from_dict(doc)
