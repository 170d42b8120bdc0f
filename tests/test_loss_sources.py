"""The fold's choice of a rank's loss among its sources, NaN kept, totals, and the import hook."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.runs.reading.sources import loss_key
from gpumon.core.runs.reading.summary import from_row, summarise, to_row
from gpumon.core.runs.reading.telemetry import RunTelemetry, save_summary
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord
from gpumon.telemetry import imports
from tests.conftest import Gpumon


def metrics(step: int | None, values: dict[str, Any], source: str | None = None, src: str = "rank0") -> dict:
    event = {"v": 1, "type": "metrics", "src": src, "t": time.time(), "pid": 1, "step": step, "metrics": values}
    if source is not None:
        event["source"] = source
    return event


def test_the_best_source_wins_and_the_curve_follows_it(tmp_path: Path) -> None:
    tele = RunTelemetry(tmp_path)
    for step in range(1, 4):
        tele.apply(metrics(step, {"loss": 9.0 + step}, "backward"))
    assert (tele.metrics["loss"], tele.loss_source) == (12.0, "backward")
    tele.apply(metrics(None, {"loss": 5.0}, "tqdm"))  # no step: the rank's last optimizer step stands in
    assert (tele.metrics["loss"], tele.loss_source) == (5.0, "tqdm")
    tele.apply(metrics(5, {"loss": 2.5, "learning_rate": 1e-3, "epoch": 0.1}, "hf"))
    tele.apply(metrics(6, {"loss": 99.0}, "tqdm"))  # a worse source after a better one: kept apart, not shown
    tele.apply(metrics(7, {"loss": 98.0}, "backward"))
    assert (tele.metrics["loss"], tele.loss_source, tele.metrics["learning_rate"]) == (2.5, "hf", 1e-3)
    assert (tele.loss.steps, tele.loss.values) == ([5], [2.5])  # the curve is hf's alone
    assert tele.step is None  # a framework's step is not the program's own step
    tele.apply(metrics(8, {"loss": 1.25}))  # telemetry.log (no source) wins
    assert (tele.metrics["loss"], tele.loss_source, tele.step) == (1.25, "telemetry", 8)
    tele.apply(metrics(9, {"loss": 0.5}, "hf"))
    assert tele.metrics["loss"] == 1.25 and tele.source_losses[0]["hf"] == 0.5


def test_framework_loss_names() -> None:
    assert loss_key({"train_loss": 1, "val_loss": 2}) == "train_loss"
    assert loss_key({"Loss/train": 1, "Loss/val": 2}) == "Loss/train"
    assert loss_key({"train_loss_step": 1, "train_loss_epoch": 2}) == "train_loss_step"
    assert loss_key({"eval_loss": 1, "lr": 2}) is None
    assert loss_key({"loss": 1, "train_loss": 2}) == "loss"


def test_nan_and_inf_are_kept_through_the_summary_and_the_index(tmp_path: Path) -> None:
    tele = RunTelemetry(tmp_path)
    tele.apply(metrics(1, {"loss": 0.5}))
    tele.apply(metrics(2, {"loss": "nan", "grad_norm": "inf", "x": "-inf"}))  # how the encoder writes them
    assert math.isnan(tele.metrics["loss"]) and tele.metrics["grad_norm"] == math.inf and tele.metrics["x"] < 0
    assert len(tele.loss) == 1 and tele.nonfinite.first == 2  # the curve keeps finite points; the NaN is counted
    tele.apply({"v": 1, "type": "total", "src": "rank0", "t": 1.0, "pid": 1, "total_steps": 75, "source": "tqdm"})
    tele.apply({"v": 1, "type": "total", "src": "rank0", "t": 2.0, "pid": 1, "total_steps": 40, "source": "hf"})
    tele.apply({"v": 1, "type": "total", "src": "rank0", "t": 3.0, "pid": 1, "total_steps": 80, "source": "tqdm"})
    assert tele.progress.total == (40, "hf")  # HF's max_steps over a tqdm bar's, whichever came last
    save_summary(tele)
    again = RunTelemetry(tmp_path)
    again.update(events=False)
    assert math.isnan(again.metrics["loss"]) and again.loss_source == "telemetry" and again.progress.total == (40, "hf")

    record = RunRecord(id="r1", dir=tmp_path, spec=RunSpec(kind="script", program="x.py"), status={})
    row = json.loads(json.dumps(to_row(summarise(record, again))))  # the index stores JSON
    back = from_row(tmp_path, row)
    assert back is not None and math.isnan(back.loss or 0.0)
    assert (back.loss_source, back.total_steps, back.total_source) == ("telemetry", 40, "hf")


def test_a_callback_runs_after_the_scripts_own_import_and_never_breaks_it(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "gpumon_probe_a.py").write_text("VALUE = 41\n")
    (tmp_path / "gpumon_probe_b.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []

    def broken(module: Any) -> None:
        raise RuntimeError("a hook bug")

    imports.when_imported("gpumon_probe_a", broken)
    imports.when_imported("gpumon_probe_a", lambda m: seen.append(m.VALUE + 1))
    imports.when_imported("gpumon_probe_never", lambda m: seen.append(-1))
    assert "gpumon_probe_a" not in sys.modules and seen == []  # nothing imported by us
    import gpumon_probe_a  # type: ignore[import-not-found]

    assert gpumon_probe_a.VALUE == 41 and seen == [42]
    import gpumon_probe_b  # type: ignore[import-not-found]  # an unwatched module: untouched

    imports.when_imported("gpumon_probe_b", lambda m: seen.append(m.VALUE))  # already imported: at once
    assert seen == [42, 1] and gpumon_probe_b.VALUE == 1 and "gpumon_probe_never" not in sys.modules
    for name in ("gpumon_probe_a", "gpumon_probe_b"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_the_rows_write_non_finite_losses_as_strings(tmp_path: Path, value: str) -> None:
    from gpumon.core.runs.record.listing import run_doc

    tele = RunTelemetry(tmp_path)
    tele.apply(metrics(1, {"loss": value}))
    record = RunRecord(id="r1", dir=tmp_path, spec=RunSpec(kind="script", program="x.py"), status={})
    doc = run_doc(summarise(record, tele))
    assert json.loads(json.dumps(doc, allow_nan=False))["loss"] == value


def test_the_run_detail_says_where_the_loss_came_from(tmp_path: Path) -> None:
    from gpumon.tui.views.runs.run_detail import info_text

    record = RunRecord(id="r1", dir=tmp_path, spec=RunSpec(kind="script", program="x.py"), status={})
    tele = RunTelemetry(tmp_path)
    tele.apply(metrics(5, {"loss": 2.0}, "hf"))
    assert "loss from the HF Trainer's logs" in info_text(summarise(record, tele)).plain
    tele.apply(metrics(6, {"loss": 1.0}))
    assert "loss from" not in info_text(summarise(record, tele)).plain  # the script's own telemetry.log


def test_another_hosts_nan_loss_reads_nan_in_its_detail() -> None:
    from gpumon.core.fleet.hosts import Host
    from gpumon.tui.views.runs.remote import RemoteRun, remote_info

    row = {"id": "r1", "status": "running", "kind": "script", "step": 7, "loss": "nan", "loss_source": "hf"}
    assert "loss nan" in remote_info(RemoteRun(Host("gpu1", "gpu1"), row)).plain


@pytest.mark.parametrize("framework", ["lightning", "transformers"])
def test_the_callbacks_added_to_a_trainer_pickle(framework: str) -> None:
    """Lightning's ddp_spawn and HF's searches pickle the trainer, callbacks included."""
    import pickle

    pytest.importorskip(framework)
    if framework == "lightning":
        from gpumon.telemetry.frameworks.lightning import new_callback as new_lightning

        callback = new_lightning("lightning.pytorch")
    else:
        from gpumon.telemetry.frameworks.hf import new_callback

        callback = new_callback()
    again = pickle.loads(pickle.dumps(callback))
    assert type(again) is type(callback) and type(again).__name__ == "GpumonCallback"


ZERO_LOSS = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(20, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 20), torch.rand(32, 1)
for _ in range(5):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)  # one class, soft targets: -(y * 0) summed
    loss.backward()
    opt.step()
print("LOSS", repr(loss.item()), flush=True)
"""


def test_a_loss_of_negative_zero_reads_0_not_minus_0(gpumon: Gpumon, tmp_path: Path) -> None:
    """PyTorch's multigpu.py adapted to CPU (PengKuang/team_scalable_timeseries multicpu.py) takes the
    cross-entropy of a one-output Linear: exactly -0.0 every step, which the table showed as "-0.00"."""
    pytest.importorskip("torch")
    script = tmp_path / "zero.py"
    script.write_text(ZERO_LOSS)
    done = gpumon("launch", "script", str(script))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    gpumon.wait_ended(run_id)
    assert "LOSS -0.0" in gpumon("logs", run_id).stdout  # the script's own value
    [row] = json.loads(gpumon("runs", "--json", run_id).stdout)["runs"]
    assert row["status"] == "finished" and row["step"] == 5 and row["loss"] == 0, row
    [line] = [line for line in gpumon("runs").stdout.splitlines() if line.startswith(run_id)]
    assert " 0.00 " in line and "-0.00" not in line, line


def test_a_ray_train_report_is_kept_whole_through_the_summary_the_index_and_the_detail(tmp_path: Path) -> None:
    from gpumon.tui.views.runs.run_detail import info_text

    tele = RunTelemetry(tmp_path)
    tele.apply(metrics(8, {"loss": 3.0}, "backward", src="rank1"))
    tele.apply(metrics(8, {"train_loss": 2.5, "[red]acc": 0.5}, "ray.train", src="rank1"))
    tele.apply(metrics(8, {"loss": 4.0}, "backward"))
    tele.apply(metrics(8, {"epoch": 0.0, "train_loss": 2.25, "[red]acc": 0.51}, "ray.train"))
    tele.apply(metrics(9, {"loss": 1.0}, "backward"))  # a step after the report: the report is still the loss
    # rank 0's report, as Ray Train's result keeps it; its train_loss outranks the backward root
    assert tele.reports.latest == {
        "source": "ray.train",
        "step": 8,
        "metrics": {"epoch": 0.0, "train_loss": 2.25, "[red]acc": 0.51},
    }
    assert (tele.metrics["loss"], tele.loss_source) == (2.25, "ray.train")
    save_summary(tele)
    again = RunTelemetry(tmp_path)
    again.update(events=False)
    record = RunRecord(id="r1", dir=tmp_path, spec=RunSpec(kind="script", program="x.py"), status={})
    back = from_row(tmp_path, json.loads(json.dumps(to_row(summarise(record, again)))))
    assert back is not None and back.reported == tele.reports.latest
    shown = info_text(back).plain  # the script's names as text, never markup
    assert "ray.train.report at step 8: epoch 0 · train_loss 2.25 · [red]acc 0.51" in shown
    assert "loss from ray.train.report" in shown
