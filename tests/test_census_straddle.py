"""A census pair that straddles a release still names what grows (a sawtooth: memory freed each epoch).

The rank takes its looks ``gap`` steps apart at step boundaries, whenever the request lands: with
``running_loss += loss`` reset every epoch, a pair taken across an epoch's end sees the graph younger and
nothing grew, and the doctor said "the tensor census saw no tensors or autograd graphs grow" with the
variable unnamed (a full-suite run of test_doctor_leak_trust.py's sawtooth test, ~1 time in 7). Here the
straddle is made on purpose: a cycle of exactly the census's gap puts both looks at the same point of two
epochs, whatever step the request lands at. The rank sees the release and looks again, closer (``again``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpumon.core.doctor.causes import census_pairs, name_causes
from gpumon.core.doctor.report import census_pending
from gpumon.core.protocol import request_census
from gpumon.core.runs.reading.telemetry import RunTelemetry
from tests.conftest import wait_until
from tests.test_alerts_channels import Cli

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "trainers" / "examples" / "leak_epoch_loss.py"
CYCLE = 20  # steps an epoch, and the census's gap: both looks at the same point of two epochs


def line_of(text: str) -> int:
    return next(n for n, line in enumerate(SCRIPT.read_text().splitlines(), 1) if text in line)


def epoch(step: int) -> int:
    """The epoch whose ``running_loss`` a census at this step sees (taken in the optimizer's step, before
    that step's ``running_loss += loss``)."""
    return (step - 1) // CYCLE


def test_a_census_asked_across_an_epoch_end_of_a_loss_reset_each_epoch_names_running_loss(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    cli = Cli(tmp_path, "")
    done = cli("launch", "script", str(SCRIPT), "--no-census", "--env", "OMP_NUM_THREADS=1", "--env",
               "GPUMON_STEP_RATE=0", "--", "--epochs", "100000", "--batches", str(CYCLE), "--step-ms", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    run_dir = cli.run_dir(run_id)
    try:
        telemetry = RunTelemetry(run_dir)

        def stepped() -> bool:
            telemetry.update()
            return (telemetry.optimizer_steps or 0) >= 3 * CYCLE  # past the first epoch: `epoch_loss` exists

        assert wait_until(stepped, timeout=120, step=0.2), cli("logs", run_id).stdout
        asked = cli("doctor", run_id, "--census", "--gap", str(CYCLE), "--json")
        assert asked.returncode == 0, asked.stderr
        report = json.loads(asked.stdout)
    finally:
        cli("stop", run_id)
    (events := RunTelemetry(run_dir, use_summary=False)).update()
    looks = events.census
    line = line_of("running_loss += loss  # the leak")
    assert report["causes"], (report["headline"], [(e["seq"], e["step"]) for e in looks])
    cause = report["causes"][0]
    assert cause["kind"] == "loss_graph" and cause["holder"] == f"`running_loss` in leak_epoch_loss.py:{line} (main)"
    assert "`running_loss += loss.item()`" in cause["advice"], cause
    # `epoch_loss` holds the last epoch's graph unchanged: it does not grow, and is not the fix.
    assert "`epoch_loss`" not in json.dumps(report["causes"]) + json.dumps(report["advice"]), report["causes"]
    steps = [e["step"] for e in looks]
    # The first pair is one cycle apart: the same point of two epochs, a release between them...
    assert steps[1] - steps[0] == CYCLE and looks[0].get("again") == CYCLE and looks[1].get("released"), steps
    # ...so the rank looked again, half as far, until a pair fell within one epoch (at most 4 looks).
    assert 3 <= len(looks) <= 4 and looks[2]["step"] - looks[1]["step"] == CYCLE // 2, steps
    assert not looks[-1].get("again") and not looks[-1].get("released"), looks[-1]
    first, second = report["censused"]
    assert (first, second) == tuple(steps[-2:]) and epoch(first) == epoch(second), (report["censused"], steps)
    # The first pair alone, as the doctor read it before: nothing grew.
    assert name_causes(looks[:2]) == {} and name_causes([*looks[:2], {**looks[1], "again": None}]) == {0: []}


# --- the rank's trigger, in this process, on a real graph ---------------------------------------------------


def test_the_trigger_looks_again_closer_when_a_kept_graph_was_released_between_its_looks(
    tmp_path: Path,
) -> None:
    torch = pytest.importorskip("torch")
    from gpumon.telemetry.census_trigger import CensusTrigger

    weight = torch.nn.Parameter(torch.ones(4))
    trigger = CensusTrigger(str(tmp_path), torch, time.time_ns() - 10**9)  # file mtimes may lag the clock

    def train(first: int, last: int, ask_at: int) -> list[tuple[int, int, int | None, bool | None]]:
        """Steps of a loop that sums its loss as a tensor, reset every 10 steps; a census asked at ``ask_at``."""
        written: list[dict] = []
        running: torch.Tensor | float = 0.0
        for step in range(first, last + 1):
            if step % 10 == 1:
                running = 0.0  # the epoch's end: its graph is released
            if step == ask_at:
                request_census(tmp_path, gap=8)
            loss = (weight * step).pow(2).sum()
            trigger.at_step(step, time.time() + step, lambda kind, **f: written.append(f))  # a check every step
            running = running + loss  # after the hook, as after optimizer.step()
        return [(w["seq"], w["step"], w.get("again"), w.get("released")) for w in written]

    # Asked at step 1, just after a reset: looks at 1 and 9, one epoch; no release, no third look.
    assert train(1, 40, ask_at=1) == [(1, 1, 8, None), (2, 9, None, False)]
    # Asked at step 45 (4 steps kept): 53 is past the reset at 51, the graph younger: looked again 4 steps on.
    assert train(41, 80, ask_at=45) == [(1, 45, 8, None), (2, 53, 4, True), (3, 57, None, False)]


def test_the_doctor_reads_the_pair_within_a_cycle_and_waits_for_the_last_look(tmp_path: Path) -> None:
    def look(seq: int, step: int, groups: list[dict], **fields: object) -> dict:
        return {"type": "census", "src": "rank0", "request": 5, "seq": seq, "step": step, "groups": groups,
                "autograd_seq": step * 30, **fields}  # fmt: skip

    def graph(name: str, nodes: int, age: int, fn: str = "AddBackward0") -> dict:
        holder = [{"name": name, "file": "t.py", "line": 3, "function": "main"}]
        return {"shape": [], "dtype": "float32", "device": "cpu", "grad_fn": fn, "requires_grad": True,
                "count": 1, "bytes": 4, "nodes": nodes, "age": age, "holders": holder}  # fmt: skip

    # Look 1 in the first epoch; look 2 after its end: the graph moved to `epoch_loss`, a fresh `running_loss`.
    one = look(1, 15, [graph("running_loss", 450, 450)], again=20)
    two = look(2, 35, [graph("running_loss", 120, 120), graph("epoch_loss", 600, 1050, "DivBackward0")],
               again=10, released=True)  # fmt: skip
    three = look(3, 45, [graph("running_loss", 420, 420), graph("epoch_loss", 600, 1350, "DivBackward0")])
    assert name_causes([one, two]) == {}  # a look is promised: not a finding yet
    (control := tmp_path / "control").mkdir()
    (control / "census").write_text("20\n")
    pending = [{**e, "request": (control / "census").stat().st_mtime_ns} for e in (one, two, three)]
    assert census_pending(tmp_path, pending[:2]) and not census_pending(tmp_path, pending)
    causes = name_causes([one, two, three])[0]
    assert [c.holder for c in causes] == ["`running_loss` in t.py:3 (main)"], [c.describe() for c in causes]
    assert census_pairs([one, two, three])[0] == (two, three)
    # The straddling pair alone named `epoch_loss` (new between its looks): read only when nothing else names.
    assert name_causes([one, {**two, "again": None}])[0][0].holder == "`epoch_loss` in t.py:3 (main)"
    quiet = {**three, "groups": two["groups"]}  # nothing grew within the cycle either
    assert census_pairs([one, two, quiet])[0] == (one, two) and name_causes([one, two, quiet])[0]
