"""The GPU suite's comparison with nvidia-smi, on outputs recorded on a real H100 (tests/data/nvidia_smi/).

The recorded snapshot was taken before gpumon read memory info v2: it counted the driver's reserved
480 MiB as used, and the comparison is what caught it.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpumon.core.gpu.crosscheck import compare_device, compare_processes, parse_csv

DATA = Path(__file__).parent / "data" / "nvidia_smi"
# The fields of the recorded query, in its order (nvidia-smi --query-gpu=... --format=csv,noheader,nounits).
RECORDED = [
    "index", "name", "uuid", "memory.total", "memory.used", "memory.free", "utilization.gpu", "utilization.memory",
    "temperature.gpu", "power.draw", "power.limit", "enforced.power.limit", "clocks.sm", "clocks.mem", "pstate",
    "mig.mode.current", "fan.speed", "ecc.errors.uncorrected.volatile.total", "driver_version",
]  # fmt: skip


def recorded() -> tuple[dict, dict]:
    (row,) = parse_csv((DATA / "h100_driver580_query_gpu.csv").read_text(), RECORDED)
    device = json.loads((DATA / "h100_driver580_snapshot_v1.json").read_text())["device"]
    return device, row


def test_a_real_h100_row_parses_into_typed_values() -> None:
    _, row = recorded()
    assert row["name"] == "NVIDIA H100 80GB HBM3" and row["uuid"].startswith("GPU-8aeaefc0")
    assert (row["memory.total"], row["memory.used"], row["temperature.gpu"]) == (81559, 0, 32)
    assert row["power.draw"] == 80.33 and row["enforced.power.limit"] == 700.0
    assert (row["pstate"], row["mig.mode.current"], row["fan.speed"]) == (0, False, None)  # fan reads [N/A]
    assert row["driver_version"] == "580.159.04"


def test_memory_info_v1_on_the_h100_is_the_one_mismatch_and_v2_agrees() -> None:
    device, row = recorded()
    checks = compare_device(device, row)
    assert [c.what for c in checks if not c.ok] == ["GPU 0 memory.used"], [c.line() for c in checks]
    assert "MISMATCH" in next(c.line() for c in checks if not c.ok)
    fixed = {**device, "mem_used": 0}  # what memory info v2 reads on the same GPU
    assert all(c.ok for c in compare_device(fixed, row))


def test_values_outside_their_tolerance_are_flagged_and_na_must_match_na() -> None:
    device, row = recorded()
    fixed = {**device, "mem_used": 0}
    bad = {**fixed, "temperature": 36, "power_limit": 600.0, "pstate": 2, "fan": 30, "sm_clock": 900}
    flagged = {c.what.split(" ", 2)[2] for c in compare_device(bad, row) if not c.ok}
    assert flagged == {"temperature.gpu", "enforced.power.limit", "pstate", "fan.speed", "clocks.sm"}
    close = {**fixed, "temperature": 34, "power_draw": 90.0, "sm_clock": 380, "gpu_util": 12.0}
    assert all(c.ok for c in compare_device(close, row))


def test_na_forms_mig_and_a_name_with_a_comma() -> None:
    fields = ["index", "name", "memory.used", "mig.mode.current", "power.draw", "pstate"]
    text = "0, Tesla V100-SXM2-16GB, 5, [N/A], [Not Supported], P8\n1, GRID A100, 40C, 0, Enabled, 61.2, P0\n"
    rows = parse_csv(text, fields)
    assert rows[0] == {"index": 0, "name": "Tesla V100-SXM2-16GB", "memory.used": 5, "mig.mode.current": None,
                       "power.draw": None, "pstate": 8}  # fmt: skip
    assert rows[1]["name"] == "GRID A100, 40C" and rows[1]["mig.mode.current"] is True


def test_processes_must_be_on_both_lists_with_the_same_memory() -> None:
    uuids = {"GPU-a": 0, "GPU-b": 1}
    ours = [
        {"gpu_index": 0, "pid": 10, "used_memory": 2048 * 2**20, "kind": "compute"},
        {"gpu_index": 1, "pid": 11, "used_memory": 100 * 2**20, "kind": "compute"},
        {"gpu_index": 0, "pid": 12, "used_memory": None, "kind": "graphics"},  # not a compute app
    ]
    theirs = parse_csv("10, GPU-a, 2048\n11, GPU-b, 98\n13, GPU-a, 5\n", ["pid", "gpu_uuid", "used_memory"])
    result = {c.what: c.ok for c in compare_processes(ours, theirs, uuids)}
    assert result == {"GPU 0 pid 10 used_memory": True, "GPU 1 pid 11 used_memory": False, "GPU 0 pid 13": False}
