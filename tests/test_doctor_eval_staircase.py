"""Issue 48, item 1: a leak that grows only at evaluation (a staircase) is named, with its holder and its fix.

Every 50 steps the script evaluates without torch.no_grad() and keeps the outputs in a list: +16 MiB a stair,
one (2048, 10) output per stair. The doctor measured the growth, then said "the tensor census saw no tensors
or autograd graphs grow: what grows is not torch's": a pair of looks 20 steps apart falls between two
evaluations three times in five, and one that held a stair saw one new tensor (under the minimum count of 3)
holding 16 MiB. Now a census that saw nothing grow is asked again, its looks wider apart (census_ask.py), and a
group's bytes count as well as its count (causes.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpumon.core.doctor.causes import name_causes
from gpumon.core.doctor.leak_state import LeakState
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.supervision.census_ask import CensusAsk
from tests.conftest import wait_until
from tests.test_alerts_channels import Cli

SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "eval_staircase.py"
MiB = 2**20


def test_an_evaluation_without_no_grad_every_50_steps_is_named_with_its_holder_and_no_grad(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    cli = Cli(tmp_path, "")
    done = cli("launch", "script", str(SCRIPT), "--env", "OMP_NUM_THREADS=1", "--",
               "--steps", "4000", "--step-ms", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    run_dir = cli.run_dir(run_id)
    events = RunTelemetry(run_dir, use_summary=False)

    def named_or_ended() -> bool:
        events.update()
        return any(name_causes(events.census).values()) or cli.status(run_id).get("state") == "finished"

    try:  # the deadline bounds a failure only: the run stops once the census named it
        assert wait_until(named_or_ended, timeout=300, step=0.5), cli("logs", run_id).stdout
    finally:
        cli("stop", run_id)
    report = json.loads(cli("doctor", run_id, "--json").stdout)
    looks = [(e["request"], e["seq"], e["step"]) for e in events.census if e["type"] == "census"]  # not pymem's
    assert report["causes"], (report["headline"], looks)
    cause = report["causes"][0]
    line = next(n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "# the leak: each output" in text)
    assert cause["kind"] == "eval_no_grad" and cause["holder"] == f"`eval_outputs[...]` in eval_staircase.py:{line}"
    assert "torch.no_grad()" in cause["advice"], cause
    assert "(2048, 10) float32 with AddmmBackward0" in cause["evidence"], cause
    assert "not torch's" not in report["headline"] and "saw no tensors" not in json.dumps(report["advice"])
    first, second = report["censused"]
    # the pair the doctor read holds an evaluation between its looks: the script evaluates after step 50k's
    # optimizer step, the look at that step comes before it (a pair 700-721 holds the evaluation at 700)
    assert any(step % 50 == 0 for step in range(first, second)), looks


# --- the supervisor's requests, on census events ----------------------------------------------------------------


def look(request: int, seq: int, step: int, count: int, **fields: object) -> dict:
    """A rank's look at the staircase: ``count`` evaluation outputs, 16 MiB of saved activations each."""
    group = {"shape": [2048, 10], "dtype": "float32", "device": "cpu", "grad_fn": "AddmmBackward0",
             "requires_grad": True, "count": count, "age": 5000, "bytes": count * 81920, "nodes": 5 * count,
             "saved_bytes": count * 16 * MiB, "freed_nodes": 0, "saved_shapes": [[2048, 1024]],
             "holders": [{"name": "eval_outputs[...]", "file": "train.py", "line": 41}]}  # fmt: skip
    return {"type": "census", "src": "rank0", "request": request, "seq": seq, "step": step, "groups": [group],
            "groups_total": 1, "autograd_seq": step * 30, **fields}  # fmt: skip


def test_a_census_that_saw_nothing_grow_is_asked_again_wider_apart_until_one_names_the_cause() -> None:
    growing = {0: LeakState("growing", slope=16 * MiB / 50)}
    ask = CensusAsk()
    assert ask.gap({0: LeakState("ok")}, []) is None  # memory does not grow: no census
    assert ask.gap(growing, []) == 20
    ask.asked, ask.request = 1, 11
    assert ask.gap(growing, [look(11, 1, 810, 16, again=20)]) is None and ask.pending([look(11, 1, 810, 16)])
    between = [look(11, 1, 810, 16, again=20), look(11, 2, 830, 16, released=False)]  # no evaluation at 810-830
    assert name_causes(between) == {0: []} and not ask.pending(between)
    assert ask.gap(growing, between) == 80  # at least one period apart: a stair between the looks
    ask.asked, ask.request = 2, 12
    across = [*between, look(12, 1, 900, 18, again=80), look(12, 2, 980, 19, released=False)]
    (cause,) = name_causes(across)[0]
    assert cause.kind == "eval_no_grad" and cause.holder == "`eval_outputs[...]` in train.py:41"
    assert "+1 tensor of shape (2048, 10)" in cause.evidence and "+16.0 MiB of saved activations" in cause.evidence
    assert ask.gap(growing, across) is None and ask.done  # named: asked no more
    tries = CensusAsk(asked=4, request=14)
    assert tries.gap(growing, [look(14, 1, 900, 18, again=20), look(14, 2, 920, 18)]) is None  # 20, 80, 320, 1280
    failed = CensusAsk(asked=1, request=15)
    assert failed.gap(growing, [look(15, 1, 900, 18, error="MemoryError: ")]) is None and failed.done


def test_one_new_tensor_of_a_few_bytes_or_one_first_seen_is_still_no_cause() -> None:
    small = [look(1, 1, 100, 4), look(1, 2, 120, 5)]
    for e in small:
        e["groups"][0].update(saved_bytes=e["groups"][0]["count"] * 4096, bytes=e["groups"][0]["count"] * 40)
    assert name_causes(small) == {0: []}  # +1 graph of 4 KiB: the batch-to-batch churn of a healthy loop
    appeared = [{**look(2, 1, 100, 1), "groups": []}, look(2, 2, 120, 1)]
    assert name_causes(appeared) == {0: []}  # one big graph that was not there: a one-off, not a collection growing


def _requests(tmp_path: Path, window_lines: list[dict]) -> list[list[str]]:
    """The supervisor's requests, pass by pass, on a rank whose memory warns and whose every census comes back
    naming no tensor; its tracemalloc window comes back with ``window_lines``."""
    from gpumon.core.protocol import CENSUS_FLAG, CONTROL_DIR, PYMEM_FLAG

    growing = {0: LeakState("growing", slope=256 * 1024)}
    assert growing[0].warning
    ask, census, passes = CensusAsk(), [], []
    control, step = tmp_path / CONTROL_DIR, 100
    control.mkdir(parents=True)

    class Notes:
        def write(self, kind: str, /, **fields: object) -> None:
            pass

    for _ in range(8):  # supervisor passes, each after what the last one asked came back
        ask.ask(tmp_path, growing, census, Notes())
        made = [f for f in (CENSUS_FLAG, PYMEM_FLAG) if (control / f).exists()]
        passes.append([f"census {(control / f).read_text().strip()}" if f == CENSUS_FLAG else "window" for f in made])
        for flag in made:
            if flag == CENSUS_FLAG:  # the rank's two looks, 16 outputs each: nothing grew
                gap = int((control / flag).read_text())
                census += [look(ask.request or 0, 1, step, 16, again=gap), look(ask.request or 0, 2, step + gap, 16)]
                step += gap
            else:
                census.append({"type": "pymem", "src": "rank0", "window": ask.python, "step": step, "to": step + 20,
                               "lines": window_lines})  # fmt: skip
            (control / flag).unlink()
    return [made for made in passes if made]


def test_the_tracemalloc_window_is_never_out_beside_a_census_and_a_line_it_names_ends_the_staircase(
    tmp_path: Path,
) -> None:
    """A census look inside the window is traced too (bench/census_in_window.py): the two requests go one at a
    time. The window follows the first census that named nothing; the staircase's wider censuses wait for it,
    and stop once it named the line that allocates what grows."""
    quiet = _requests(tmp_path / "nothing", [])
    assert quiet == [["census 20"], ["window"], ["census 80"], ["census 320"], ["census 1280"]], quiet
    line = {"file": "train.py", "line": 30, "function": "decode", "bytes": 5 * MiB, "count": 20, "per_step": 256 * 1024}
    named = _requests(tmp_path / "named", [line])
    assert named == [["census 20"], ["window"]], named  # named: no wider census to pay for
