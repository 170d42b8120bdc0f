"""The product's main path: a 2-process gloo DDP run on digits through the launcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.core.runs.reading.monitor import RunsMonitor
from gpumon.core.runs.record.spec import RunSpec, default_nproc
from gpumon.core.runs.record.store import RunStore
from gpumon.core.runs.supervision.launcher import launch, wait
from tests.conftest import needs_installed

pytest.importorskip("torch")
needs_installed("sklearn")  # the trainers import it, not this process


def test_default_ddp_run_trains_and_reports_both_ranks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    store = RunStore()
    nproc = default_nproc("ddp", None, visible=0)
    assert nproc == 2  # what `gpumon launch ddp` and the form's defaults use on this 2-core CPU machine
    spec = RunSpec(kind="ddp", nproc=nproc, args=("--epochs", "4", "--lr", "0.1"))
    record = launch(spec, store, visible_gpus=0)
    final = wait(record, store, timeout=120)
    assert final.state == "finished", final.log_path(None).read_text()[-3000:]
    assert final.exit_code == 0

    monitor = RunsMonitor(store)
    (listed,) = monitor.refresh()
    assert not listed.series  # an ended run is listed from its index row; its series come with the detail
    summary = monitor.summary(listed.id)
    assert summary is not None and summary.series
    assert summary.skipped == 0
    losses = summary.loss_values
    assert len(losses) >= 40
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5  # it learns
    assert sorted(summary.memory_series) == [0, 1]  # each rank's per-step memory
    for steps, values in summary.memory_series.values():
        assert steps[:3] == (1, 2, 3) and len(steps) == len(losses)
        assert all(v > 0 for v in values)
    assert summary.memory_kind == "heap"
    assert final.log_ranks() == [0, 1]
    assert "val_acc" in final.log_path(0).read_text()
    assert (final.dir / "checkpoints").is_dir()
