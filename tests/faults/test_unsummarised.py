"""A run never summarised (an older gpumon's, or copied from elsewhere) is folded once, chunk by chunk, and
its summary written, so the next reader reads one small file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

from tests.faults.unsummarised import write_unsummarised

Gpumon = Callable[..., CompletedProcess[str]]


def test_a_run_without_a_summary_is_folded_once_and_summarised(gpumon: Gpumon, tmp_path: Path) -> None:
    run_dir = write_unsummarised(tmp_path / "home" / "runs", "script-1124-101010-ab12", steps=60_000)
    assert (run_dir / "events" / "rank0.4242.jsonl.gz").stat().st_size > 0
    done = gpumon("runs", "--json")
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["runs"]
    assert row["status"] == "finished" and row["step"] == 60_000 and abs(row["loss"] - 2.0 / 61) < 1e-9, row
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final"] is True and summary["optimizer_steps"] == 60_000
    # the next readers pay nothing: the raw events are not needed again
    shutil.rmtree(run_dir / "events")
    (tmp_path / "home" / "index.sqlite3").unlink()  # not even the index's row
    [again] = json.loads(gpumon("runs", "--json").stdout)["runs"]
    assert again["step"] == 60_000 and again["loss"] == row["loss"]
    doctor = gpumon("doctor", "script-1124-101010-ab12", "--json")
    assert doctor.returncode == 0 and json.loads(doctor.stdout)["run"] == "script-1124-101010-ab12"
