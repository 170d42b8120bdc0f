"""The loss and totals a script's frameworks already show, with no change to the script.

Each script in tests/data/frameworks/ is launched as a user would (``gpumon launch script ... --follow``)
and writes what it computed (or what its framework logged) to a file; ``gpumon runs --json`` must show
the same loss, where it came from, and the total steps.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

DATA = Path(__file__).resolve().parent / "data" / "frameworks"


@pytest.fixture
def launch(tmp_path: Path):
    env = {
        **os.environ,
        "GPUMON_HOME": str(tmp_path / "home"),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3 keeps the file store behind this switch
    }

    def run(script: str, *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the run's row in ``gpumon runs --json``, what the script wrote)."""
        shutil.copy(DATA / script, tmp_path / script)
        out = tmp_path / "out.json"
        cmd = [sys.executable, "-m", "gpumon", "launch", "script", script, "--follow", "--", str(out), *args]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=600)
        assert done.returncode == 0 and out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
        listed = subprocess.run(
            [sys.executable, "-m", "gpumon", "runs", "--json"], env=env, capture_output=True, text=True, cwd=tmp_path
        )
        (row,) = json.loads(listed.stdout)["runs"]
        assert row["status"] == "finished", row
        return row, json.loads(out.read_text())

    return run


def test_hf_trainer_loss_and_max_steps(launch) -> None:
    pytest.importorskip("transformers")
    row, wrote = launch("hf_gpt2.py")
    logged = [entry["loss"] for entry in wrote["log_history"] if "loss" in entry]
    assert len(logged) == 8  # max_steps 40, logging_steps 5
    assert row["loss"] == pytest.approx(logged[-1], abs=1e-9)
    assert row["loss_source"] == "hf"
    assert (row["total_steps"], row["total_source"]) == (40, "hf")  # not tqdm's bar, which HF also draws


def _backward_losses(run_dir: str) -> dict[int, float]:
    """The loss gpumon read from each step's backward roots (its ``backward`` source), by step."""
    from gpumon.core.events import EventReader

    events = EventReader(Path(run_dir)).each()
    return {e["step"]: e["metrics"]["loss"] for e in events if e["type"] == "metrics" and e.get("source") == "backward"}


def test_hf_trainer_gradient_accumulation_steps_loss_is_the_one_it_logs(launch) -> None:
    """gradient_accumulation_steps=4, a log every step: HF's own loss wins, and the loss gpumon reads from the
    backward roots (a run with no HF callback would show it) is HF's logged loss for each step, not a quarter."""
    pytest.importorskip("transformers")
    row, wrote = launch("hf_gpt2.py", "4", "1")
    logged = {entry["step"]: entry["loss"] for entry in wrote["log_history"] if "loss" in entry}
    assert len(logged) == 40 and (row["loss"], row["loss_source"]) == (pytest.approx(logged[40], abs=1e-9), "hf")
    seen = _backward_losses(row["dir"])
    assert len(seen) >= 20, seen
    for step, value in seen.items():
        assert value == pytest.approx(logged[step], rel=1e-5), (step, value, logged[step])


def test_lightning_accumulate_grad_batches_loss_is_the_steps_mean(launch) -> None:
    """A LightningModule that logs nothing, accumulate_grad_batches=4: the loss (from backward) is the mean of
    the four training_step losses of each optimizer step, which Lightning divides by 4 before each backward."""
    pytest.importorskip("lightning")
    row, wrote = launch("lightning_accumulate.py")
    by_step: dict[int, list[float]] = {}
    for before, loss in zip(wrote["steps"], wrote["losses"], strict=True):
        by_step.setdefault(before + 1, []).append(loss)
    assert wrote["global_step"] == 10 and {len(v) for v in by_step.values()} == {4}
    mean = {step: sum(losses) / 4 for step, losses in by_step.items()}
    assert row["loss_source"] == "backward" and row["loss"] == pytest.approx(mean[10], rel=1e-5), (row, mean)
    seen = _backward_losses(row["dir"])
    assert seen, row
    for step, value in seen.items():
        assert value == pytest.approx(mean[step], rel=1e-5), (step, value, mean[step])


def test_lightning_self_log_and_estimated_stepping_batches(launch) -> None:
    pytest.importorskip("lightning")
    row, wrote = launch("lightning_module.py")
    assert row["loss"] == pytest.approx(wrote["losses"][-1], rel=1e-6)
    assert row["loss_source"] == "lightning"
    assert (row["total_steps"], row["total_source"]) == (wrote["total"], "lightning") == (30, "lightning")


def test_lightnings_progress_shows_in_the_log_while_it_runs(tmp_path: Path) -> None:
    """Rich's bar, Lightning's default with rich installed, draws nothing into a log until the run ends (the
    log showed only a warning at step 112 of 200): under gpumon the log shows Lightning's TQDM bar as it runs.
    A Rich bar the script passed itself is kept."""
    pytest.importorskip("lightning")
    pytest.importorskip("rich")
    from tests.conftest import wait_ended, wait_until

    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    shutil.copy(DATA / "lightning_bar.py", tmp_path / "lightning_bar.py")

    def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done

    go = tmp_path / "go"
    runs = {}
    for choice in ("default", "rich"):
        bar = tmp_path / f"{choice}.json"
        launched = gpumon(
            "launch", "script", str(tmp_path / "lightning_bar.py"), "--json", "--", str(bar), str(go), choice
        )
        runs[choice] = json.loads(launched.stdout.splitlines()[-1])["id"]

    def row() -> dict[str, Any]:
        (found,) = [r for r in json.loads(gpumon("runs", "--json").stdout)["runs"] if r["id"] == runs["default"]]
        return found

    def mid_run() -> dict[str, Any] | None:
        shown = gpumon("logs", runs["default"]).stdout
        return {"log": shown} if "12/100" in shown else None

    # Waited for in the log's file (a `gpumon logs` a poll is a CPU start while two Lightning runs import), then
    # asked of `gpumon logs`, as the user reads it.
    log_file = tmp_path / "home" / "runs" / runs["default"] / "logs" / "rank0.log"
    wait_until(lambda: log_file.exists() and "12/100" in log_file.read_text(errors="replace"), timeout=240, step=0.2)
    seen = wait_until(mid_run, timeout=30, step=1.0)
    try:
        assert seen, gpumon("logs", runs["default"]).stdout[-2000:]
        # The run waits at step 112 now. Its row comes from the supervisor's summary.json, saved every 2 s
        # (SUMMARY_EVERY_S), so it may lag the log: wait for the total to reach it while the run still waits.
        seen["row"] = wait_until(lambda: (found := row())["total_steps"] is not None and found, timeout=120, step=0.5)
        assert seen["row"], row()
        assert seen["row"]["status"] == "running" and seen["row"]["total_steps"] == 200, seen["row"]
        last = [line for line in seen["log"].splitlines() if line.startswith("Epoch 1:")][-1]
        assert "| 12/100 [" in last and "train_loss=" in last, last  # the bar as a terminal would show it now
        assert json.loads((tmp_path / "default.json").read_text()) == {"bar": "TQDMProgressBar"}
        # the second run, started after it, may still be importing Lightning: it writes its bar once it has its Trainer
        assert wait_until(lambda: (tmp_path / "rich.json").exists(), timeout=240, step=0.5), gpumon(
            "logs", runs["rich"]
        )
        assert json.loads((tmp_path / "rich.json").read_text()) == {"bar": "RichProgressBar"}  # chosen: kept
    finally:
        go.touch()
    wait_ended(tmp_path / "home", *runs.values(), timeout=240)
    listed = json.loads(gpumon("runs", "--json").stdout)["runs"]
    assert len(listed) == 2 and all(r["status"] == "finished" for r in listed), gpumon("runs").stdout
    assert "Epoch 1: 100%" in gpumon("logs", runs["default"]).stdout
    from gpumon.core.events import EventReader

    notes = [e["text"] for e in EventReader(Path(seen["row"]["dir"])).poll() if e["type"] == "note"]
    assert any(n.startswith("Lightning's progress bar is its TQDM bar here") for n in notes), notes  # said why


def test_tqdm_postfix_and_the_nested_bars_total(launch) -> None:
    pytest.importorskip("tqdm")
    row, wrote = launch("tqdm_loop.py")
    assert row["loss"] == pytest.approx(wrote["shown"][-1], rel=1e-9)
    assert row["loss_source"] == "tqdm"
    assert (row["total_steps"], row["total_source"]) == (75, "tqdm")  # 3 epochs x 25 batches
    assert row["progress"] == 1.0  # and all of them done at the end


def test_telemetry_log_wins_over_a_framework(launch) -> None:
    pytest.importorskip("tqdm")
    row, wrote = launch("tqdm_loop.py", "telemetry")
    assert wrote["raw"][-1] != pytest.approx(wrote["shown"][-1])
    assert row["loss"] == pytest.approx(wrote["raw"][-1], rel=1e-9)
    assert row["loss_source"] == "telemetry"
    assert row["step"] == 75


@pytest.mark.parametrize("package", ["torch.utils.tensorboard", "tensorboardX"])
def test_summary_writer_scalars(launch, package: str) -> None:
    pytest.importorskip("tensorboard" if package.startswith("torch") else "tensorboardX")
    row, wrote = launch("summary_writer.py", *(["x"] if package == "tensorboardX" else []))
    assert row["loss"] == pytest.approx(wrote["losses"][-1], rel=1e-9)
    assert row["loss_source"] == "tensorboard"


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_experiment_trackers(launch, tracker: str) -> None:
    pytest.importorskip(tracker, reason=f"{tracker} is not installed (pip install -c constraints.txt -e '.[test]')")
    row, wrote = launch("trackers.py", tracker)
    assert row["loss"] == pytest.approx(wrote["losses"][-1], rel=1e-9)
    assert row["loss_source"] == tracker


def test_a_nan_loss_stays_a_value(launch, tmp_path: Path) -> None:
    row, _ = launch("nan_loss.py")
    assert row["loss"] == "nan" and row["loss_source"] == "telemetry"
    summary = json.loads((Path(row["dir"]) / "summary.json").read_text())
    assert math.isnan(summary["latest"]["0"]["loss"]) and math.isinf(summary["latest"]["0"]["grad_norm"])


def test_a_hook_that_fails_never_reaches_the_script(launch) -> None:
    pytest.importorskip("tqdm")
    row, wrote = launch("broken_value.py")
    assert wrote == {"finished": True}
    assert row["loss"] == 0.5 and row["loss_source"] == "tqdm"  # read before the failure
    notes = json.loads((Path(row["dir"]) / "summary.json").read_text())["notes"]
    assert any("gpumon's tqdm hook is off: RuntimeError: cannot read me" in note for note in notes)


BARS = """
from tqdm import tqdm
for _ in tqdm(range(100), desc="preprocess"):  # ends before training: no longer counts
    pass
bar = tqdm(range(30), desc="train", mininterval=0)
for step in bar:
    if step == 10:
        for _ in tqdm(range(5), desc="eval", leave=False):  # opened mid-run: not a loop of the train bar
            pass
    bar.set_postfix_str(f"loss={1.0 / (step + 1):.5f}, acc: 0.5")
"""


def test_tqdm_totals_follow_the_outermost_open_bar_and_leave_out_an_evaluation_bar(tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    from gpumon.core.events import EventReader
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.supervision.launcher import BOOTSTRAP_DIR

    (tmp_path / "bars.py").write_text(BARS)
    env = {**os.environ, "GPUMON_RUN_DIR": str(tmp_path / "run"), "PYTHONPATH": BOOTSTRAP_DIR}
    done = subprocess.run([sys.executable, "bars.py"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    totals = [(e["total_steps"], e["done"]) for e in EventReader(tmp_path / "run").poll() if e["type"] == "total"]
    assert totals[0][0] == 100 and totals[-1] == (30, 30)
    assert {total for total, _ in totals} == {100, 30}  # never 30 x 5
    tele = RunTelemetry(tmp_path / "run")
    tele.update()
    assert tele.metrics["loss"] == pytest.approx(1 / 30, abs=1e-5) and tele.metrics["acc"] == 0.5


def test_postfix_metrics_are_written_no_faster_than_the_step_rate_and_the_last_always(tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    from gpumon.core.events import EventReader
    from gpumon.core.runs.supervision.launcher import BOOTSTRAP_DIR

    script = "from tqdm import tqdm\nbar = tqdm(range(20000))\nfor i in bar:\n    bar.set_postfix(loss=i)\n"
    (tmp_path / "fast.py").write_text(script)
    env = {**os.environ, "GPUMON_RUN_DIR": str(tmp_path / "run"), "PYTHONPATH": BOOTSTRAP_DIR}
    env["GPUMON_STEP_RATE"] = "50"
    done = subprocess.run([sys.executable, "fast.py"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = [e for e in EventReader(tmp_path / "run").poll() if e["type"] == "metrics"]
    span = written[-1]["t"] - written[0]["t"]
    assert len(written) <= 50 * span + 3  # 50 a second, plus the first and the one at exit
    assert written[-1]["metrics"] == {"loss": 19999} and written[-1]["source"] == "tqdm"


# The shape of a popular tutorial (aladdinpersson/Machine-Learning-Collection, pytorch_progress_bar.py): a bar per
# epoch at module level, the last one still referenced when the interpreter tears the modules down.
OPEN_AT_EXIT = """import torch
from tqdm import tqdm
from torch.utils.data import TensorDataset, DataLoader
loader = DataLoader(TensorDataset(torch.randn(40, 3), torch.randn(40, 1)), batch_size=8)
for epoch in range(2):
    loop = tqdm(loader)
    for idx, (x, y) in enumerate(loop):
        loop.set_postfix(loss=0.25)
"""


def test_a_bar_collected_at_interpreter_exit_prints_nothing_of_gpumon(tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    from gpumon.core.runs.supervision.launcher import BOOTSTRAP_DIR

    (tmp_path / "bars.py").write_text(OPEN_AT_EXIT)
    env = {**os.environ, "GPUMON_RUN_DIR": str(tmp_path / "run"), "PYTHONPATH": BOOTSTRAP_DIR, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "bars.py"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "gpumon" not in done.stderr, done.stderr[-2000:]
