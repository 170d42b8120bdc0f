"""Progress, ETA, STEP and pace on the training patterns people use (issue 48), real runs through gpumon: a tqdm
bar over micro-batches with gradient accumulation (over the whole run, and one bar per epoch), a run resumed from
a checkpoint (``tqdm(total=6000, initial=5000)``; Lightning's ``fit(ckpt_path=)``), and a run that stops stepping
before the stall rule fires. Every row read is checked against tests/invariants.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Gpumon, wait_until
from tests.invariants import check_pace, check_progress

pytest.importorskip("torch")
pytest.importorskip("tqdm")

SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"


def launch(gpumon: Gpumon, script: str, *args: str) -> str:
    done = gpumon("launch", "script", str(SCRIPTS / script), "--", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1].split()[-1]


def row(gpumon: Gpumon, run_id: str) -> dict[str, Any]:
    rows = json.loads(gpumon("runs", "--json").stdout)["runs"]
    found = next(r for r in rows if r["id"] == run_id)
    check_progress(found)
    check_pace(found)
    return found


def at(out: Path, timeout: float = 300) -> dict[str, Any]:
    assert wait_until((out / "at.json").exists, timeout=timeout, step=0.1), "the script never reached its pause"
    return json.loads((out / "at.json").read_text())


def folded(gpumon: Gpumon, run_id: str, since: float) -> dict[str, Any]:
    """The run's row once its supervisor has folded what the script wrote after ``since`` (summary.json, every
    2 s while something new came)."""
    summary = gpumon.home / "runs" / run_id / "summary.json"
    assert wait_until(lambda: summary.exists() and summary.stat().st_mtime > since, timeout=60, step=0.1)
    return row(gpumon, run_id)


def finished(gpumon: Gpumon, run_id: str) -> dict[str, Any]:
    gpumon.wait_ended(run_id, timeout=300)
    last = row(gpumon, run_id)
    assert last["status"] == "finished", (last, gpumon("logs", run_id).stdout[-2000:])
    return last


def test_a_bar_over_micro_batches_with_accumulation_is_read_in_its_own_unit(gpumon: Gpumon, tmp_path: Path) -> None:
    """The issue's run: 4 micro-batches a step. Against optimizer steps its 80 micro-batches read 23% at 95% done
    and 25% at the end; one bar per epoch read 47% at 95% done (its 40 micro-batches against 19 steps)."""
    whole, per_epoch, by_hand = tmp_path / "whole", tmp_path / "epoch", tmp_path / "by_hand"
    whole.mkdir(), per_epoch.mkdir(), by_hand.mkdir()
    run_id = launch(gpumon, "accum_bar.py", str(whole), "run")
    epoch_id = launch(gpumon, "accum_bar.py", str(per_epoch), "epoch")
    hand_id = launch(gpumon, "accum_bar.py", str(by_hand), "epoch-total")
    try:
        mine = at(whole)
        assert (mine["micro_batches"], mine["of"], mine["steps"]) == (76, 80, 19)
        live = folded(gpumon, run_id, mine["t"])
        assert (live["total_steps"], live["total_source"]) == (80, "tqdm")
        assert live["progress"] == pytest.approx(0.95) and live.get("position") == 76, live
        assert live["eta_s"] is not None and live["step"] == 19, live  # STEP: optimizer steps, not micro-batches

        theirs = at(per_epoch)
        assert theirs["micro_batches"] == 76
        shown = folded(gpumon, epoch_id, theirs["t"])
        assert shown["step"] == 19, shown
        assert shown["progress"] is None and shown["total_steps"] is None and shown["eta_s"] is None, shown
        assert "epoch" in shown["progress_why"], shown  # unknown, and why: never an epoch's share as the run's

        # a bar made again each epoch, not over the loader: known for what it is once it starts again
        made = folded(gpumon, hand_id, at(by_hand)["t"])
        assert made["step"] == 19 and made["progress"] is None and made["eta_s"] is None, made
        assert "starts again" in made["progress_why"], made
    finally:
        for out in (whole, per_epoch, by_hand):
            (out / "gate").touch()
    last = finished(gpumon, run_id)
    assert (last["progress"], last["position"], last["step"]) == (1.0, 80, 20), last
    for other_id in (epoch_id, hand_id):
        other = finished(gpumon, other_id)
        assert other["progress"] is None and other["step"] == 20, other


def test_a_resumed_bar_shows_the_jobs_progress_eta_and_step(gpumon: Gpumon, tmp_path: Path) -> None:
    """``tqdm(total=6000, initial=5000)``: gpumon counted from 1 and said "4%" at 88% done (280 of 6000, its ETA
    for 5,720 steps), and 16% at the end; its STEP said 280 where the bar said 5280."""
    run_id = launch(gpumon, "resumed_bar.py", str(tmp_path))
    try:
        mine = at(tmp_path)
        assert mine["step"] == 5280
        live = folded(gpumon, run_id, mine["t"])
        assert (live["total_steps"], live["total_source"], live["step"]) == (6000, "tqdm", 5280), live
        assert live.get("position") == 5280, live
        assert live["progress"] == pytest.approx(0.88), live
        # the bar counts optimizer steps: what is left is 720 of them, at the run's pace (not 5,720)
        assert live["eta_s"] == pytest.approx(720 * live["step_time_s"], rel=0.05), live
        assert " 5280 " in gpumon("runs").stdout
    finally:
        (tmp_path / "gate").touch()
    last = finished(gpumon, run_id)
    assert (last["progress"], last["step"], last["position"]) == (1.0, 6000, 6000), last


LIGHTNING = """
import sys
import lightning as L
import torch


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(80, 8), torch.randn(80, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)  # 10 steps an epoch
ckpt, steps = sys.argv[1], int(sys.argv[2])
trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_model_summary=False, enable_progress_bar=False)
if steps < 40:
    trainer.fit(Tiny(), loader)
    trainer.save_checkpoint(ckpt)
else:
    trainer.fit(Tiny(), loader, ckpt_path=ckpt)
"""


def test_a_lightning_run_resumed_from_a_checkpoint_ends_at_its_jobs_step_and_100_percent(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    """``fit(ckpt_path=)`` at global_step 30 of max_steps 40: gpumon counted 10 steps, said 25% at the end and
    STEP 10 where Lightning said 40."""
    pytest.importorskip("lightning")
    import subprocess
    import sys

    script, ckpt = tmp_path / "resume.py", tmp_path / "at30.ckpt"
    script.write_text(LIGHTNING)
    env = {**gpumon.env, "OMP_NUM_THREADS": "1"}
    made = subprocess.run([sys.executable, str(script), str(ckpt), "30"], env=env, capture_output=True, text=True)
    assert made.returncode == 0 and ckpt.exists(), made.stderr[-2000:]
    gpumon.env["OMP_NUM_THREADS"] = "1"
    done = gpumon("launch", "script", str(script), "--", str(ckpt), "40")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1].split()[-1]
    last = finished(gpumon, run_id)
    assert (last["total_steps"], last["total_source"]) == (40, "lightning"), last
    assert (last["progress"], last["step"], last["position"]) == (1.0, 40, 40), last


HF_TRAINER = """
import sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


out, steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2))
args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=4, report_to=[],
                         save_strategy="steps", save_steps=30, use_cpu=True, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(64))
trainer.train(resume_from_checkpoint=f"{out}/checkpoint-30" if steps > 30 else None)
"""


def test_an_hf_trainer_run_resumed_from_a_checkpoint_ends_at_its_jobs_step_and_100_percent(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    """``train(resume_from_checkpoint=)`` at global_step 30 of max_steps 40: gpumon counted 10 steps and said 25%
    at the end (HF loads the checkpoint's step after on_train_begin: that hook's step 0 is no position)."""
    pytest.importorskip("transformers")
    import subprocess
    import sys

    script, out = tmp_path / "hf_resume.py", tmp_path / "out"
    script.write_text(HF_TRAINER)
    env = {**gpumon.env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    made = subprocess.run([sys.executable, str(script), str(out), "30"], env=env, capture_output=True, text=True)
    assert made.returncode == 0 and (out / "checkpoint-30").exists(), made.stderr[-2000:]
    gpumon.env.update(env)
    done = gpumon("launch", "script", str(script), "--", str(out), "40")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1].split()[-1]
    last = finished(gpumon, run_id)
    assert (last["total_steps"], last["total_source"]) == (40, "hf"), last
    assert (last["progress"], last["step"], last.get("position")) == (1.0, 40, 40), last


def test_a_run_that_stops_stepping_falls_at_once_and_says_how_long_before_the_stall_rule(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    """A rank blocked after step 40: for 88 s until the stall rule fired, SPEED said 18.7 it/s, the doctor "pace:
    18.7 it/s" and /metrics a step of 0.053 s. The rule is kept far off here (600 s): the fall is the pace's own."""
    from gpumon.core.runs.reading.progress import rate_text

    gpumon.env["GPUMON_STALL_AFTER"] = "600"
    run_id = launch(gpumon, "stops_stepping.py", str(tmp_path))
    blocked = tmp_path / "blocked.json"
    try:
        assert wait_until(blocked.exists, timeout=300, step=0.1), gpumon("runs").stdout
        stopped = json.loads(blocked.read_text())["t"]
        # the row once the quiet is clearly past the usual step (5 s here: 10 x 0.05 s is less)
        time.sleep(max(0.0, stopped + 6 - time.time()))
        asked = time.time()
        first = row(gpumon, run_id)
        assert first["status"] == "running" and first["step"] == 40, first  # no stall yet: the rule is 600 s
        assert first["step_time_s"] >= asked - stopped - 0.5, (first, asked - stopped)  # at most a step in T
        assert first["median_step_s"] < 0.5 and first.get("quiet_s", 0) >= asked - stopped - 0.5, first
        check_pace(first, asked)
        # the FLOP rate (and MFU, tokens/s, samples/s) is taken at the same pace: it falls with it
        assert first["flops_per_step"], first
        assert first["achieved_flops_per_s"] == pytest.approx(first["flops_per_step"] / first["step_time_s"], rel=1e-6)
        (line,) = [ln for ln in gpumon("runs").stdout.splitlines() if ln.startswith(run_id)]
        assert "running, no step for " in line and "it/s" not in line, line
        doctor = gpumon("doctor", run_id).stdout
        pace_line = next(ln for ln in doctor.splitlines() if "pace:" in ln)
        assert "s/it by the wall clock: no step for " in pace_line, pace_line  # not the 20 it/s of its last steps
        later = wait_until(
            lambda: (r := row(gpumon, run_id))["step_time_s"] > first["step_time_s"] + 2 and r, timeout=60, step=0.5
        )
        assert later, (first, row(gpumon, run_id))  # it keeps falling while the run waits

        # the Runs view's reader: a summary that does not change (nothing written) still falls, and says so
        from gpumon.core.runs.reading.monitor import RunsMonitor
        from gpumon.core.runs.record.store import RunStore
        from gpumon.tui.views.runs.run_table import run_cells

        monitor = RunsMonitor(RunStore(gpumon.home))
        seen = next(s for s in monitor.refresh() if s.id == run_id)
        time.sleep(1.5)
        again = next(s for s in monitor.refresh() if s.id == run_id)
        assert again.step_time_s is not None and seen.step_time_s is not None
        assert again.step_time_s > seen.step_time_s, (seen.step_time_s, again.step_time_s)
        assert run_cells(again, 25)["status"].text.plain.startswith("no step "), run_cells(again, 25)["status"]
        assert rate_text(again.step_time_s).endswith("s/it")

        # /metrics (serve reads the same monitor): its step time is the fallen one, not the 0.05 s of the last steps
        import urllib.request

        from tests.serve_helpers import serving

        with serving(gpumon.home) as (state, base):
            asked = time.time()
            state.polled.clear()
            assert state.polled.wait(30)
            text = urllib.request.urlopen(base + "metrics", timeout=30).read().decode()
        (line,) = [ln for ln in text.splitlines() if ln.startswith("gpumon_run_step_time_seconds") and run_id in ln]
        assert float(line.split()[-1]) >= asked - stopped - 0.5, (line, asked - stopped)
    finally:
        (tmp_path / "gate").touch()
    last = finished(gpumon, run_id)
    assert last["step"] == 45 and last["quiet_s"] is None, last


def test_the_quiet_counts_from_the_ranks_last_write_and_positions_survive_the_summary(tmp_path: Path) -> None:
    """A summary is folded every 2 s: its latest step may be seconds old while the rank steps on. The pace falls
    only for a quiet its events file confirms (nothing written since); a position and its unit come back from
    summary.json as they were."""
    import os

    from gpumon.core.events import EventWriter
    from gpumon.core.runs.reading.quiet import written
    from gpumon.core.runs.reading.telemetry import RunTelemetry, save_summary

    rank0 = EventWriter(tmp_path, "rank0")
    t = 1000.0
    rank0.write("total", t=t, total_steps=6000, done=5000, source="tqdm", step=0)
    for step in range(1, 201):
        t += 0.05
        rank0.write("step", t=t, step=step, dt=0.05)
        if step % 50 == 0:
            rank0.write("total", t=t, total_steps=6000, done=5000 + step, source="tqdm", step=step)
    folded = RunTelemetry(tmp_path, use_summary=False)
    folded.update()
    save_summary(folded)
    again = RunTelemetry(tmp_path)
    again.update(events=False)
    progress = again.progress
    assert progress.job_step() == 5200 and again.current_step == 5200 and progress.position() == 5200
    assert progress.total == (6000, "tqdm")

    os.utime(rank0.path, (t + 3, t + 3))  # the rank wrote 3 s after the summary's last step: it steps on
    steady = progress.fields(False, None, t + 3.02, written(tmp_path))
    assert steady["step_time_s"] == pytest.approx(0.05, rel=0.01) and steady["quiet_s"] == pytest.approx(0.02, abs=1e-6)
    assert steady["eta_s"] == pytest.approx(800 * 0.05, rel=0.01)  # 800 steps left at its pace

    os.utime(rank0.path, (t, t))  # nothing written since the last step: 30 s of quiet
    quiet = progress.fields(False, None, t + 30, written(tmp_path))
    assert quiet["quiet_s"] == pytest.approx(30) and quiet["step_time_s"] >= 30  # at most one step in 30 s
    check_pace({**quiet, "status": "running"}, t + 30)
    assert progress.fields(True)["step_time_s"] == pytest.approx(0.05, rel=0.01)  # an ended run: its last minutes


def test_every_ddp_rank_drawing_its_own_bar_is_one_position_not_a_bar_that_starts_again() -> None:
    """Two ranks each with a bar over the same steps, their events interleaved a step apart: read per rank (the
    lowest's wins), never as one bar going back (which would read as a bar per epoch: progress unknown)."""
    from gpumon.core.runs.reading.progress import Progress

    progress, t = Progress(), 0.0
    for step in range(1, 101):
        t += 0.1
        for rank, behind in ((0, 0), (1, 1)):
            progress.fold("step", {"t": t, "step": step - behind, "dt": 0.1}, rank)
            if step % 10 == 0:
                event = {"t": t, "total_steps": 400, "done": step - behind, "source": "tqdm", "step": step - behind}
                progress.fold("total", event, rank)
    fields = progress.fields(False, None, t)
    assert (fields["total_steps"], fields["position"], fields["progress_why"]) == (400, 100, None), fields
    assert fields["progress"] == pytest.approx(0.25) and progress.job_step() == 100
