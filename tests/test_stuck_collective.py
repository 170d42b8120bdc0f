"""Issue 51, points 4 and 5: the stuck collective, named live while the run hangs, with no code.

Real torchrun, real gloo process groups on the CPU (``data/scripts/stuck_collective.py``): the ranks step with an
all_reduce a step, then at step 8 one rank calls broadcast instead, or blocks in its data loading, or all-reduces
half the bytes. The stall rule is set short through config.toml's ``[runs] stall_after``; at the stall each rank's
last collective started and finished (op, number, bytes, group, file:line) and the verdict are in the row, the
doctor, the alert and /metrics. Gloo aborts a size mismatch instead of hanging: the doctor says it after the
failure, from the same records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Gpumon, wait_until
from tests.serve_helpers import get, start_serve, stop

pytest.importorskip("torch")

SCRIPT = Path(__file__).parent / "data" / "scripts" / "stuck_collective.py"
SOURCE = SCRIPT.read_text().splitlines()


def line_of(text: str) -> str:
    return f"stuck_collective.py:{next(n for n, line in enumerate(SOURCE, 1) if text in line)}"


BROADCAST, ALL_REDUCE = line_of("dist.broadcast(grads"), line_of("dist.all_reduce(grads)")
HALF, SLEEP = line_of("dist.all_reduce(grads[:"), line_of("time.sleep(3600)")
ASYNC = line_of("    dist.all_reduce(grads, async_op=True)")


@pytest.fixture
def stuck(gpumon: Gpumon, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Launch the script under torchrun with a 4 s stall rule (config.toml); every run is stopped at the end."""
    yield from stuck_runs(gpumon, tmp_path)


def stuck_runs(gpumon: Gpumon, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """The ``stuck`` fixture's body (test_gpu_stuck.py's too)."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text("[runs]\nstall_after = 4\n")
    gpumon.env["GPUMON_CONFIG_DIR"] = str(config)
    ids: list[str] = []

    def launch(how: str, nproc: int, *more: str) -> str:
        done = gpumon("launch", "script", str(SCRIPT), "--nproc", str(nproc), "--json", "--", how, *more)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["id"])
        return ids[-1]

    yield launch
    for run_id in ids:
        gpumon("stop", run_id)


def stalled(gpumon: Gpumon, run_id: str) -> dict[str, Any]:
    """The run's stall from `gpumon runs --json`, once it has one."""

    def stall() -> dict[str, Any] | None:
        rows = json.loads(gpumon("runs", "--json").stdout)["runs"]
        return next((r["stall"] for r in rows if r["id"] == run_id and r["status"] == "stalled"), None)

    found = wait_until(stall, timeout=120, step=0.5)
    assert found, "no stall"
    return found


def alert_text(gpumon: Gpumon, run_id: str) -> str:
    path = gpumon.home / "runs" / run_id / "alerts.jsonl"
    (alert,) = [a for a in map(json.loads, path.read_text().splitlines()) if a.get("kind") == "stalled"]
    return str(alert["text"])


def detail(gpumon: Gpumon, run_id: str) -> str:
    """The run's detail pane in the Runs view, as the app renders it from the run's files."""
    from gpumon.core.runs.reading.summary import summarise
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.record.store import RunStore
    from gpumon.tui.views.runs.run_detail import info_text

    record = RunStore(gpumon.home / "runs").load(gpumon.home / "runs" / run_id)
    telemetry = RunTelemetry(record.dir)
    telemetry.update()
    return info_text(summarise(record, telemetry)).plain


def samples(url: str, name: str, run_id: str) -> list[Any]:
    families = text_string_to_metric_families(get(url + "metrics")[2].decode())
    return [s for f in families if f.name == name for s in f.samples if s.labels["run"] == run_id]


def assert_mismatch_stall(gpumon: Gpumon, run_id: str, all_reduce: str) -> str:
    """The "mismatch" script's stall: rank 1 in broadcast #8, rank 0 in all_reduce #8 at ``all_reduce``; the
    headline."""
    stall = stalled(gpumon, run_id)
    head = f"a collective mismatch: rank 1 is in broadcast #8 ({BROADCAST}) while rank 0 is in all_reduce #8"
    assert stall["headline"] == head
    assert stall["collectives"] == [
        f"rank 0: in all_reduce #8 (default, 4.0 MiB, {all_reduce}); last finished all_reduce #7",
        f"rank 1: in broadcast #8 (default, 4.0 MiB, {BROADCAST}); last finished all_reduce #7",
    ]
    return head


def test_a_broadcast_against_an_all_reduce_is_a_collective_mismatch_named_live(gpumon: Gpumon, stuck: Any) -> None:
    run_id = stuck("mismatch", 2)
    head = assert_mismatch_stall(gpumon, run_id, ALL_REDUCE)
    assert f"hang: collective mismatch at #8, rank 1 in broadcast at {BROADCAST}" in alert_text(gpumon, run_id)
    doctor = gpumon("doctor", run_id).stdout
    assert head in doctor.splitlines()[0]
    assert f"Make rank 1 call the same collective as the others ({BROADCAST})" in doctor
    assert f"  rank 1: in broadcast #8 (default, 4.0 MiB, {BROADCAST}); last finished all_reduce #7" in doctor
    assert f"  rank 1: in broadcast #8 (default, 4.0 MiB, {BROADCAST})" in detail(gpumon, run_id)  # the Runs view's
    proc, url = start_serve(gpumon.home, "--simulate", "1")
    try:
        found = wait_until(lambda: samples(url, "gpumon_run_stuck_collective", run_id), timeout=60, step=0.5)
        assert found and found[0].value == 1.0
        labels = found[0].labels
        assert (labels["verdict"], labels["op"], labels["seq"], labels["ranks"]) == ("mismatch", "all_reduce", "8", "1")
        started = {s.labels["rank"]: (s.labels["op"], s.value) for s in samples(
            url, "gpumon_run_rank_collective_started_seq", run_id)}  # fmt: skip
        assert started == {"0": ("all_reduce", 8.0), "1": ("broadcast", 8.0)}
    finally:
        stop(proc)


def test_a_rank_blocked_in_an_async_all_reduces_wait_is_named_in_it(gpumon: Gpumon, stuck: Any) -> None:
    # dist.all_reduce(t, async_op=True) returns at once; the rank blocks later, in work.wait()
    assert_mismatch_stall(gpumon, stuck("mismatch", 2, "--async-op"), ASYNC)


def test_a_rank_blocked_in_its_data_loading_never_reached_the_all_reduce(gpumon: Gpumon, stuck: Any) -> None:
    run_id = stuck("missing", 2)
    stall = stalled(gpumon, run_id)
    head = f"rank 1 never reached all_reduce #8: it waits in next_batch at {SLEEP} (time.sleep)"
    assert stall["headline"] == head and stall["blame"] == [1]
    last = f"rank 1: not in a collective; last finished all_reduce #7 (default, 4.0 MiB, {ALL_REDUCE})"
    assert stall["collectives"][1] == last
    assert f"hang: rank 1 never reached all_reduce #8; it waits in next_batch at {SLEEP}" in alert_text(gpumon, run_id)
    doctor = gpumon("doctor", run_id).stdout
    assert head in doctor.splitlines()[0] and "Look at rank 1: it never reached the collective" in doctor


def test_a_size_mismatch_names_the_rank_with_other_bytes(gpumon: Gpumon, stuck: Any) -> None:
    run_id = stuck("size", 3)
    gpumon.wait_ended(run_id, timeout=120)  # gloo aborts a size mismatch (NCCL hangs: tests/test_gpu_stuck.py)
    doctor = gpumon("doctor", run_id).stdout
    head = "ranks 0 and 1 are in all_reduce #8 with 4.0 MiB, rank 2 with 2.0 MiB: a size mismatch"
    assert re.search(rf"failed, exit code \d+  {re.escape(head)}; the run failed: ", doctor.splitlines()[0]), doctor
    assert f"  rank 2: in all_reduce #8 (default, 2.0 MiB, {HALF}); last finished all_reduce #7" in doctor
    assert f"Give every rank the same size in all_reduce ({HALF})" in doctor
    diagnosis = json.loads(gpumon("doctor", run_id, "--json").stdout)
    assert diagnosis["collective"]["kind"] == "size_mismatch" and diagnosis["collective"]["ranks"] == [2]
    # NCCL dumps its Flight Recorder at a timeout into the folder gpumon named (no NCCL here: a file in its place)
    dumps = gpumon.home / "runs" / run_id / "fr"
    (dumps / "rank_0").write_bytes(b"")
    assert f"fr_trace {dumps} -p rank_" in gpumon("doctor", run_id).stdout


def test_the_flight_recorder_is_on_in_the_ranks_unless_the_user_set_it(tmp_path: Path) -> None:
    from gpumon.core.runs.supervision.launcher import flight_recorder

    cpu = flight_recorder(tmp_path, {"CUDA_VISIBLE_DEVICES": ""})
    assert cpu == {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr" / "rank_")}
    gpu = flight_recorder(tmp_path, {"CUDA_VISIBLE_DEVICES": "0", "TORCH_FR_BUFFER_SIZE": "100"})
    assert "TORCH_FR_BUFFER_SIZE" not in gpu  # the user's own
    assert gpu["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and gpu["TORCH_NCCL_ENABLE_TIMING"] == "1"
