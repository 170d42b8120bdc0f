"""Issue 52, the memory: a leak that is not torch's is named down to the script's line and the dict that keeps it.

The script caches every decoded sample's bytes in a dict that never evicts (+256 KiB a step, host memory only).
The doctor said "What grows is not torch's tensors ... tracemalloc finds Python's" and left the work to the user.
Now, once the tensor census named nothing, the supervisor asks the growing rank for a tracemalloc window
(telemetry/pymem.py): the doctor, its JSON and the leak alert name the line that allocates, the dict, and the
bounded cache that fixes it.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from gpumon.core.doctor.causes import name_causes
from gpumon.core.runs.reading.telemetry import RunTelemetry
from tests.conftest import wait_until
from tests.test_alerts_channels import Cli

SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "sample_cache.py"


def line_of(text: str) -> int:
    return next(n for n, source in enumerate(SCRIPT.read_text().splitlines(), 1) if text in source)


def test_a_dict_that_caches_every_sample_is_named_with_its_line_and_the_lru_cache_fix(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    cli = Cli(tmp_path, "")
    done = cli("launch", "script", str(SCRIPT), "--env", "OMP_NUM_THREADS=1", "--",
               "--steps", "6000", "--step-ms", "15")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    events = RunTelemetry(cli.run_dir(run_id), use_summary=False)

    def alerted_or_ended() -> bool:
        events.update()
        return bool(events.alerts) or cli.status(run_id).get("state") == "finished"

    try:  # the deadline bounds a failure only: the run stops once the leak alert went out
        assert wait_until(alerted_or_ended, timeout=240, step=0.5), cli("logs", run_id).stdout
    finally:
        cli("stop", run_id)
    report = json.loads(cli("doctor", run_id, "--json").stdout)
    assert report["causes"], (report["headline"], events.notes, events.census)
    cause = report["causes"][0]
    allocates = f"sample_cache.py:{line_of('return sample.numpy().tobytes()')} (decode)"
    caches = f"called from sample_cache.py:{line_of('decoded[step] = decode(step)')}"
    assert cause["kind"] == "python_objects" and cause["holder"] == "`decoded` in sample_cache.py", cause
    assert allocates in cause["evidence"] and caches in cause["evidence"], cause
    assert "a dict of" in cause["evidence"] and "256.0 KiB a step" in cause["evidence"], cause
    assert "`@functools.lru_cache(maxsize=N)` on `decode`" in cause["advice"] and "`decoded`" in cause["advice"]
    assert "`decoded`" in report["headline"] and "not torch's" not in json.dumps(report["advice"]), report
    alert = next(a for a in events.alerts if a.startswith("memory leak on rank 0"))
    assert "`decoded` (dict) keeps what " + allocates in alert, alert
    window = next(e for e in events.census if e["type"] == "pymem")
    assert window["frames"] == 8 and window["ms"] < 2000, window  # bounded: then tracemalloc is off


def test_the_window_stops_tracing_and_leaves_a_tracing_script_alone(tmp_path: Path) -> None:
    """The rank's side alone: a window turns tracemalloc on and off; a script that traces keeps its tracing."""
    from gpumon.core.protocol import request_pymem
    from gpumon.telemetry.pymem import PyMemTrigger

    written: list[dict] = []
    kept: dict[int, bytes] = {-i: b"" for i in range(10)}
    trigger = PyMemTrigger(str(tmp_path), time.time_ns() - 10**9, lambda: 0)
    request_pymem(tmp_path, [0], steps=5)
    for step in range(1, 9):
        kept[step] = bytes(200_000)
        trigger.at_step(step, float(step), lambda kind, **f: written.append({"type": kind, **f}))
        if step == 1:
            assert tracemalloc.is_tracing()
    assert not tracemalloc.is_tracing() and written, written
    assert written[0]["lines"][0]["holder"]["name"] == "kept", written
    assert written[0]["lines"][0]["function"] == "test_the_window_stops_tracing_and_leaves_a_tracing_script_alone"
    assert name_causes([{**written[0], "src": "rank0"}])[0][0].kind == "python_objects"
    tracemalloc.start()
    try:
        request_pymem(tmp_path, [0], steps=2)
        wait_until(lambda: False, timeout=0.05)  # a new mtime for the new request
        for step in range(10, 16):
            trigger.at_step(step, 100.0 + step, lambda kind, **f: written.append(f))
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()


def test_a_list_that_keeps_every_batchs_records_is_told_to_clear_or_use_a_bounded_deque(tmp_path: Path) -> None:
    from gpumon.core.protocol import request_pymem
    from gpumon.telemetry.pymem import PyMemTrigger

    written: list[dict] = []
    records: list[bytes] = [b""] * 10
    trigger = PyMemTrigger(str(tmp_path), time.time_ns() - 10**9, lambda: 0)
    request_pymem(tmp_path, [0], steps=4)
    for step in range(1, 8):
        records.append(bytes(100_000) + bytes([step]))  # each batch's records, never dropped
        trigger.at_step(step, float(step), lambda kind, **f: written.append({"type": kind, "src": "rank0", **f}))
    cause = name_causes(written)[0][0]
    assert cause.holder == f"`records` in {Path(__file__).name}", cause
    assert "`records.clear()`" in cause.advice and "collections.deque(maxlen=N)" in cause.advice, cause


def test_a_window_that_saw_no_line_grow_points_below_python_not_back_to_tracemalloc() -> None:
    from gpumon.core.doctor.leak_advice import leak_advice
    from gpumon.core.doctor.leak_state import LeakState

    host = LeakState("leak", slope=262144.0, strength=0.9, runs_out_at=90_000, samples=300, step=300)
    window = {"type": "pymem", "src": "rank0", "window": 1, "step": 200, "to": 220, "lines": [], "ms": 40.0}
    advice = leak_advice({0: host}, (), censused=(160, 180), window=window)
    assert advice[0].key == "leak_not_tensors", advice
    assert "tracemalloc over steps 200 to 220 saw no line of the script grow" in advice[0].why, advice[0]
    assert "MALLOC_ARENA_MAX" in advice[0].change and "tracemalloc.start()" not in advice[0].change, advice[0]
