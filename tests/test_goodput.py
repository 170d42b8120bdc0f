"""Issue 52, the time: every run's wall time split into start-up, steps, checkpoint saves, evaluation, stalls,
restarts and the end, from the hooks a script gets on its own imports (no code). A real run that starts up slowly,
saves with torch.save and evaluates under torch.no_grad() times each part itself: the ledger in ``gpumon runs --json``
agrees with it, and the doctor says the part that took the run's time, with its fix."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from tests.conftest import wait_ended

SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"
Gpumon = Callable[..., CompletedProcess[str]]
PARTS = ("startup", "steps", "checkpoint", "eval", "stall", "restart", "end")


@pytest.fixture(scope="module")
def ledger_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str, dict[str, Any], dict[str, float]]:
    """The ended run of ledger_run.py: (gpumon, its id, its ``runs --json`` row, the script's own times)."""
    pytest.importorskip("torch")
    from tests.conftest import Gpumon as Cli

    gpumon = Cli(tmp_path_factory.mktemp("ledger"))
    return (gpumon, *_finished(gpumon, "ledger_run.py"))


def _finished(gpumon: Any, script: str) -> tuple[str, dict[str, Any], dict[str, float]]:
    """Launch one of the scripts here and wait for its end: its id, ``runs --json`` row, and its own times."""
    done = gpumon("launch", "script", str(SCRIPTS / script))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    wait_ended(gpumon.home, run_id, timeout=180)
    [row] = json.loads(gpumon("runs", "--json", run_id).stdout)["runs"]
    assert row["status"] == "finished", row
    log = gpumon("logs", run_id, "--lines", "400").stdout
    own = json.loads(re.search(r"OWN_LEDGER=(\{.*\})", log).group(1))  # type: ignore[union-attr]
    return run_id, row, own


def test_the_ledger_splits_the_wall_time_into_the_parts_the_script_timed_itself(
    ledger_run: tuple[Any, str, dict[str, Any], dict[str, float]],
) -> None:
    _, _, row, own = ledger_run
    ledger = row["ledger"]
    wall = ledger["wall"]
    assert wall == pytest.approx(row["ended"] - row["started"], abs=0.01), (ledger, row)
    assert sum(ledger[part] for part in PARTS) == pytest.approx(wall, rel=0.02), ledger
    for part in ("startup", "steps", "checkpoint", "eval"):  # each within a third of the script's own clock
        assert abs(ledger[part] - own[part]) <= own[part] / 3, (part, ledger, own)
    assert own["startup"] >= 6.0 and own["checkpoint"] >= 4.5 and own["eval"] >= 2.0, own  # 3 saves, 2 evaluations
    assert (ledger["saves"], ledger["evals"]) == (3, 2), ledger
    assert ledger["stall"] == 0 and ledger["restart"] == 0, ledger
    assert ledger["end"] >= 1.5, ledger  # it writes its results for 1.5 s after the last step, then exits
    assert row["goodput"] == pytest.approx(ledger["steps"] / wall, abs=0.001), row


def test_the_doctor_says_which_part_took_the_run_s_time_with_its_fix(
    ledger_run: tuple[Any, str, dict[str, Any], dict[str, float]],
) -> None:
    gpumon, run_id, row, _ = ledger_run
    ledger = row["ledger"]
    doctor = json.loads(gpumon("doctor", run_id, "--json").stdout)
    share = ledger["startup"] / ledger["wall"]
    torch = ledger["imports"]  # the script's `import torch`, measured in the rank: said, and no finding on its own
    assert 0 < torch < ledger["startup"] - 5.9, ledger  # the script's 6 s index comes before its import of torch
    took = f"{ledger['startup']:.1f} s before the first step, {torch:.1f} s of it importing torch"
    line = f"{share:.0%} of this run was start-up ({took})"
    assert doctor["headline"] == line, (doctor["headline"], ledger)
    keys = [advice["key"] for advice in doctor["advice"]]
    assert keys[0] == "startup", keys
    assert "cache" in doctor["advice"][0]["title"] and "-X importtime" in doctor["advice"][0]["change"]
    text = gpumon("doctor", run_id).stdout
    assert f"time: GOODPUT {row['goodput']:.0%} of " in text, text
    assert f"checkpoint saves {ledger['checkpoint']:.1f} s (3)" in text, text
    assert f"evaluation {ledger['eval']:.1f} s (2)" in text, text
    if ledger["checkpoint"] / ledger["wall"] >= 0.2 and ledger["checkpoint"] >= 5:  # said with its count and cost
        [found] = [s["text"] for s in doctor["time"] if s["kind"] == "checkpoint"]
        assert "of this run was saving checkpoints (3 saves, 1.5 s each)" in found, found
        assert "async_checkpoint" in keys and "async_save" in json.dumps(doctor["advice"])


def test_the_runs_detail_shows_goodput_and_the_parts_that_took_the_time(
    ledger_run: tuple[Any, str, dict[str, Any], dict[str, float]],
) -> None:
    from gpumon.core.runs.reading.summary import read_one
    from gpumon.core.runs.record.store import RunStore
    from gpumon.tui.views.runs.run_detail import info_text

    gpumon, run_id, row, _ = ledger_run
    record = RunStore(gpumon.home).load(gpumon.home / "runs" / run_id)
    assert record is not None
    text = " ".join(info_text(read_one(record)).plain.split())
    ledger = row["ledger"]
    startup = ledger["startup"] / ledger["wall"]
    assert f" · GOODPUT {row['goodput']:.0%} (start-up {startup:.0%}" in text, text  # the largest part first


def test_checkpoints_saved_by_torch_distributed_checkpoint_and_safetensors_are_counted_once_each(
    gpumon: Any,
) -> None:
    pytest.importorskip("safetensors")
    done = gpumon("launch", "script", str(SCRIPTS / "ledger_saves.py"))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    wait_ended(gpumon.home, run_id, timeout=180)
    [row] = json.loads(gpumon("runs", "--json", run_id).stdout)["runs"]
    assert row["status"] == "finished" and "SAVED=2" in gpumon("logs", run_id, "--lines", "50").stdout, row
    ledger = row["ledger"]
    assert ledger["saves"] == 2 and ledger["checkpoint"] > 0, ledger  # dcp.save's own writes inside it: one save


def test_an_evaluation_the_stall_rule_called_a_stall_is_counted_once_as_evaluation(gpumon: Any) -> None:
    """With ``[runs] stall_after = 1`` the supervisor calls each 3 s no-grad evaluation of ledger_stalled.py a stall
    (nothing is said until it ends), the second one still open at the run's end. Its seconds are the evaluation's
    alone: the parts still sum to the wall, and the steps keep their own time (they had been left 0 s)."""
    pytest.importorskip("torch")
    config = gpumon.cwd / "config"
    config.mkdir()
    (config / "config.toml").write_text("[runs]\nstall_after = 1\n")
    gpumon.env["GPUMON_CONFIG_DIR"] = str(config)
    run_id, row, own = _finished(gpumon, "ledger_stalled.py")
    events = "".join(p.read_text() for p in (gpumon.home / "runs" / run_id / "events").glob("launcher.*.jsonl"))
    assert '"type":"stall"' in events, "the stall rule never fired: the run proves nothing"
    ledger = row["ledger"]
    assert sum(ledger[part] for part in PARTS) == pytest.approx(ledger["wall"], rel=0.02), ledger
    assert abs(ledger["eval"] - own["eval"]) <= own["eval"] / 3 and ledger["evals"] == 2, (ledger, own)
    assert abs(ledger["steps"] - own["steps"]) <= max(own["steps"] / 3, 0.3), (ledger, own)
    # what is left is the time after the last evaluation (its 1 s of results and the exit): the end, or the stall
    # still open then, never the evaluations again
    after = ledger["wall"] - ledger["startup"] - ledger["steps"] - ledger["eval"]
    assert ledger["stall"] + ledger["end"] == pytest.approx(after, abs=0.05) and after < 4.0, ledger


def test_a_recorded_rank_s_saves_evaluations_stall_and_restart_each_go_to_their_part() -> None:
    """The fold alone, on a rank's events as the hooks and the supervisor write them: the parts sum to the wall."""
    from types import SimpleNamespace

    from gpumon.core.runs.reading.ledger import Ledger

    ledger = Ledger()
    events = [
        ("proc_start", 100.0, {}),
        ("step", 110.0, {"step": 1}),  # start-up: 99 -> 110
        ("step", 120.0, {"step": 50}),
        ("phase", 120.0, {"phase": "save", "how": "torch.save"}),
        ("phase", 123.0, {"phase": "train", "after": "save"}),  # a 3 s save
        ("phase", 130.0, {"phase": "eval"}),
        ("step", 132.0, {"step": 80}),  # a 2 s evaluation (model.eval(), ended by the next step)
        ("phase", 135.0, {"phase": "eval", "since": 134.0, "how": "no_grad"}),  # a 1 s no-grad one
        ("stall", 141.0, {"since": 140.0}),
        ("stall_end", 150.0, {"lasted_s": 10.0}),
        ("step", 160.0, {"step": 200}),
        ("phase", 161.0, {"phase": "exit"}),
    ]
    for kind, t, fields in events:
        ledger.fold(kind, {"type": kind, "t": t, **fields}, 0)
    restart = SimpleNamespace(failed_t=150.0, lost_s=5.0, gap_s=4.0)  # after the stall, before the step
    parts = ledger.seconds(99.0, 165.0, True, [restart])
    assert parts["startup"] == 11.0 and parts["checkpoint"] == 3.0 and parts["eval"] == 3.0, parts
    assert parts["stall"] == 10.0 and parts["restart"] == 5.0 and parts["end"] == 5.0, parts  # after the last step
    assert (parts["saves"], parts["evals"]) == (1, 2), parts
    assert sum(parts[p] for p in PARTS) == pytest.approx(parts["wall"]) == 66.0, parts
    live = Ledger.from_state(ledger.to_state()).seconds(99.0, 165.0, False, [])  # live: no end yet, kept as steps
    assert live["end"] == 0.0 and live["steps"] == parts["steps"] + 5.0 + 5.0, live


def test_a_stall_said_after_the_step_that_ended_it_or_open_at_the_end_leaves_its_pauses_theirs() -> None:
    """The fold alone: the supervisor's stall event comes a pass after its onset, here after the steps resumed; a
    second stall is still open at the run's end, beside a save that never returned. Each second is in one part."""
    from gpumon.core.runs.reading.ledger import Ledger

    ledger = Ledger()
    events = [
        ("step", 10.0, {"step": 1}, "rank0"),
        ("step", 11.0, {"step": 2}, "rank0"),
        ("phase", 15.0, {"phase": "eval", "since": 11.0, "how": "no_grad"}, "rank0"),  # 4 s of evaluation
        ("step", 15.5, {"step": 3}, "rank0"),
        ("stall", 16.0, {"since": 11.0}, "launcher"),  # said after the step that ended it: 0.5 s of stall
        ("stall_end", 17.0, {"since": 11.0, "lasted_s": 6.0}, "launcher"),  # to a later step: not counted again
        ("step", 18.0, {"step": 4}, "rank0"),
        ("stall", 21.0, {"since": 18.0}, "launcher"),
        ("phase", 22.0, {"phase": "save", "how": "torch.save"}, "rank0"),  # never returns: killed at 30
    ]
    for kind, t, fields, src in events:
        ledger.fold(kind, {"type": kind, "t": t, "src": src, **fields}, 0)
    parts = ledger.seconds(9.0, 30.0, True, [])
    assert parts["eval"] == 4.0 and parts["checkpoint"] == 0.0, parts  # the save's last word was its start
    assert parts["stall"] == 0.5 + 12.0 and parts["end"] == 0.0, parts  # the open one, from 18 to the end
    assert sum(parts[p] for p in PARTS) == pytest.approx(parts["wall"]) == 21.0, parts
    live = Ledger.from_state(ledger.to_state()).seconds(9.0, 30.0, False, [])  # live: the save is going on
    assert live["checkpoint"] == 8.0 and live["stall"] == 0.5 + 4.0, live
    assert sum(live[p] for p in PARTS) == pytest.approx(21.0), live


def test_a_hung_rank_s_restart_is_counted_once_as_restart_not_as_stall_too(gpumon: Any, tmp_path: Path) -> None:
    """A real torchrun (``--max-restarts 1``, two gloo ranks): in the first attempt rank 1 hangs at step 16, the stall
    rule fires (``[runs] stall_after = 1``), rank 0's all-reduce raises gloo's 4 s timeout, torchrun starts both
    again and they resume from step 10. The stall ran until the new attempt's first step, but from the failure on
    its seconds are the restart's (to the return to step 16, the 6 steps redone with them): the stall keeps what
    came before the failure, and the steps keep the 36 the job needed (80 ms each at least)."""
    pytest.importorskip("torch")
    config = gpumon.cwd / "config"
    config.mkdir()
    (config / "config.toml").write_text("[runs]\nstall_after = 1\nstall_steps = 5\n")
    gpumon.env["GPUMON_CONFIG_DIR"] = str(config)
    done = gpumon(
        "launch", "script", str(SCRIPTS / "restarts.py"), "--nproc", "2", "--max-restarts", "1", "--",
        "--hang", "4", "--steps", "36", "--fail-at", "16", "--ckpt", str(tmp_path / "ckpt.txt"), "--step-ms", "80",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    wait_ended(gpumon.home, run_id, timeout=180)
    [row] = json.loads(gpumon("runs", "--json", run_id).stdout)["runs"]
    events = "".join(p.read_text() for p in (gpumon.home / "runs" / run_id / "events").glob("launcher.*.jsonl"))
    [stall] = [e for e in map(json.loads, events.splitlines()) if e["type"] == "stall"]
    [told] = row["restarts"]
    assert row["status"] == "finished" and told["redone"] == 6 and not told["lost_so_far"], row
    # the hung rank is named, not rank 0 whose all-reduce gave up on it
    assert told["rank"] == 1 and told["what"].startswith("went silent (no exception, no exit: hung or killed), and "
                                                         "rank 0 gave up on it: RuntimeError: "), told  # fmt: skip
    assert "Timed out waiting" in told["what"], told
    ledger = row["ledger"]
    assert sum(ledger[part] for part in PARTS) == pytest.approx(ledger["wall"], rel=0.02), ledger
    assert ledger["restart"] == pytest.approx(told["lost_s"], abs=0.01), (ledger, told)
    assert ledger["stall"] == pytest.approx(told["failed_t"] - stall["since"], abs=0.05), (ledger, told, stall)
    # 15 + 20 intervals between steps not redone, each an 80 ms sleep and a step (the redone steps are the restart's)
    assert 35 * 0.08 <= ledger["steps"] <= 35 * 0.08 * 3, ledger


def test_a_stall_that_runs_into_a_restart_leaves_the_restart_its_seconds_live_and_ended() -> None:
    """The fold alone: the ranks stop at 20 (a hang), the stall is said at 22, a timeout fails the attempt at 24,
    the next attempt steps at 30 and is back where it failed at 32. Live at 28 the failure's 4 s are already the
    restart's (its next attempt has not stepped yet); at the end the stall is 20-24 alone."""
    from types import SimpleNamespace

    from gpumon.core.runs.reading.ledger import Ledger

    ledger = Ledger()
    hung = [("step", 10.0, {"step": 1}), ("step", 20.0, {"step": 16}), ("stall", 22.0, {"since": 20.0})]
    for kind, t, fields in hung:
        ledger.fold(kind, {"type": kind, "t": t, **fields}, 0)
    waiting = SimpleNamespace(failed_t=24.0, lost_s=None, gap_s=None)
    live = ledger.seconds(9.0, 28.0, False, [waiting])
    assert (live["stall"], live["restart"]) == (4.0, 4.0) and sum(live[p] for p in PARTS) == 19.0, live
    for kind, t, fields in [("step", 30.0, {"step": 1}), ("step", 40.0, {"step": 30})]:
        ledger.fold(kind, {"type": kind, "t": t, **fields}, 0)
    back = SimpleNamespace(failed_t=24.0, lost_s=8.0, gap_s=6.0)
    parts = Ledger.from_state(ledger.to_state()).seconds(9.0, 41.0, True, [back])
    assert (parts["stall"], parts["restart"], parts["end"]) == (4.0, 8.0, 1.0), parts
    assert parts["steps"] == 10.0 + 8.0 and sum(parts[p] for p in PARTS) == parts["wall"] == 32.0, parts
