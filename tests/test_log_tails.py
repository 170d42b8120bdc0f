"""The Runs view's log pane as its feed reads it every second (tui/views/runs/reading.py ``LogTails``): a log that
did not move is not read again, and every way a log moves (a line, a new rank, a capped log's ``.live``, a log
replaced) is shown at the next read."""

from __future__ import annotations

import os
from pathlib import Path

from gpumon.core.logs import live
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord
from gpumon.tui.views.runs.reading import LogTails, read_log


def test_an_unchanged_log_is_not_read_again_and_each_change_is_shown(tmp_path: Path) -> None:
    run_dir = tmp_path / "script-1128-140000-a1b2"
    (run_dir / "logs").mkdir(parents=True)
    record = RunRecord(run_dir.name, run_dir, RunSpec("script", program="train.py"), {"state": "running"})
    rank0 = record.log_path(0)
    rank0.write_text("epoch 0 loss 2.31\n")
    tails = LogTails()
    first = tails.read(record, 0)
    assert first.lines == ("epoch 0 loss 2.31",) and first.choices == (0,)
    assert tails.read(record, 0) is first  # nothing moved: the same tail, no listing, no read

    with rank0.open("a") as fh:
        fh.write("epoch 1 loss 1.70\n")
    assert tails.read(record, 0).lines == ("epoch 0 loss 2.31", "epoch 1 loss 1.70")

    record.log_path(1).write_text("rank 1 up\n")  # a rank's log appears: the choices grow
    assert tails.read(record, 0).choices == (0, 1)
    assert tails.read(record, 1).lines == ("rank 1 up",)  # another choice is read at once
    assert tails.read(record, 7).choice == 0  # an unknown choice falls back to the first log, as read_log does

    replaced = run_dir / "logs" / "new.tmp"  # the log replaced whole by one of the same size
    replaced.write_text("epoch 9 loss 0.01\nepoch 9 loss 0.02\n")
    os.replace(replaced, rank0)
    assert tails.read(record, 0).lines == ("epoch 9 loss 0.01", "epoch 9 loss 0.02")

    live.publish(rank0, 10_000, b"past the cap: step 5000\n", final=False)  # a capped log's latest output
    assert tails.read(record, 0).lines == read_log(record, 0).lines
    assert tails.read(record, 0).lines[-1] == "past the cap: step 5000"
