"""Issue 16 point 2: a census taken late, on a graph far bigger than it can walk, still names who keeps it.

A deep model (1,000 layers, ~2,000 autograd nodes a step) whose epoch loop sums the loss as a
tensor, censused at step 150 (300,000 nodes alive, 25 times the census's 12,000-node walk): the finding
names the variable, its file:line and function, and the fix is in the advice list. The fixed twin, censused
the same way, names nothing and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest

from gpumon.core.protocol import request_census
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord, RunStore
from gpumon.core.runs.supervision.launcher import launch, wait

EXAMPLE = Path(__file__).resolve().parents[1] / "trainers" / "examples" / "leak_deep_graph.py"
CENSUS_AT = 150  # 300,000 nodes kept: the walk (MAX_NODES) sees a 25th of them, as at any later step
# the censuses come at ~CENSUS_AT and 20 steps on (census_trigger's gap); the run ends ~40 steps after that
STEPS = CENSUS_AT + 60


def _doctor(record: RunRecord, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gpumon", "doctor", record.id, *flags]
    return subprocess.run(argv, capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def censused(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunRecord]:
    pytest.importorskip("torch")
    os.environ["GPUMON_HOME"] = str(tmp_path_factory.mktemp("home"))
    try:
        store = RunStore()
        runs: dict[str, RunRecord] = {}
        for name, flags in (("leak", ()), ("fixed", ("--fixed",))):
            spec = RunSpec(
                kind="script",
                program=str(EXAMPLE),
                args=(*flags, "--steps", str(STEPS), "--layers", "1000"),
                env=(("OMP_NUM_THREADS", "1"),),
                no_census=True,  # this test asks, late, as a user would
            )
            runs[name] = launch(spec, store, 0)
        asked: set[str] = set()
        read = {name: RunTelemetry(record.dir) for name, record in runs.items()}  # each read on from where it was
        deadline = time.monotonic() + 240
        while len(asked) < len(runs) and time.monotonic() < deadline:
            for name, record in runs.items():
                telemetry = read[name]
                telemetry.update()
                if name not in asked and (telemetry.optimizer_steps or 0) >= CENSUS_AT:
                    request_census(record.dir)
                    asked.add(name)
            time.sleep(0.2)
        assert asked == set(runs), f"a run ended or stalled before step {CENSUS_AT}"
        return {name: wait(record, store, timeout=240) for name, record in runs.items()}
    finally:
        os.environ.pop("GPUMON_HOME", None)


def test_a_late_census_names_the_variable_that_keeps_a_deep_graph(
    censused: dict[str, RunRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    record = censused["leak"]
    monkeypatch.setenv("GPUMON_HOME", str(record.dir.parent.parent))
    telemetry = RunTelemetry(record.dir)
    telemetry.update()
    census = [e for e in telemetry.census if e.get("seq") in (1, 2)]
    assert len(census) == 2 and census[0]["step"] >= CENSUS_AT
    assert census[0]["truncated"], "the graph fit in the walk: this test would not show a late census"
    found = json.loads(_doctor(record, "--json").stdout)
    cause = found["causes"][0]
    assert cause["kind"] == "loss_graph", cause
    assert cause["holder"] == "`running_loss` in leak_deep_graph.py:32 (train_epoch)"
    assert "reaching back" in cause["evidence"]
    first = found["advice"][0]
    assert "running_loss" in first["title"] and "loss.item()" in first["change"]
    text = _doctor(record).stdout
    assert "`running_loss` in leak_deep_graph.py:32 (train_epoch) keeps every step's autograd graph" in text
    assert "--census" not in text  # the census was taken: no advice to take it again


def test_the_fixed_twin_censused_alike_names_nothing_and_says_so(
    censused: dict[str, RunRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    record = censused["fixed"]
    monkeypatch.setenv("GPUMON_HOME", str(record.dir.parent.parent))
    found = json.loads(_doctor(record, "--json").stdout)
    assert found["causes"] == [] and found["censused"][0] >= CENSUS_AT
    assert "saw no tensors or autograd graphs grow" in _doctor(record).stdout


def _held_in_frame(torch: object) -> dict:
    from gpumon.telemetry.census import take_census

    kept = []
    for _ in range(3):
        kept.append(torch.ones(3, requires_grad=True) * 2)  # type: ignore[attr-defined]
    return take_census(torch)


def test_holders_name_a_list_in_a_frame_and_the_census_keeps_nothing_alive() -> None:
    torch = pytest.importorskip("torch")
    from gpumon.telemetry.census import take_census
    from gpumon.telemetry.holders import accumulated_at

    found = _held_in_frame(torch)
    named = [g for g in found["groups"] if g.get("holders")]
    assert any(h["name"] == "kept[...]" and h["function"] == "_held_in_frame" for g in named for h in g["holders"])
    assert accumulated_at(_held_in_frame.__code__, "kept") == _held_in_frame.__code__.co_firstlineno + 5

    loss = torch.ones(2, requires_grad=True).sum() * 3
    gone = weakref.ref(loss)
    take_census(torch)  # reads this frame's locals, which hold `loss`
    del loss
    assert gone() is None, "the census left a reference to a tensor of the script's frame"
