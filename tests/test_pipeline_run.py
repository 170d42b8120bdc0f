"""The README's pipeline example, run for real: 2 stage processes under torchrun, launched by gpumon."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.events import EventReader
from tests.conftest import needs_installed

pytest.importorskip("torch")
needs_installed("sklearn")  # the trainers import it, not this process


def test_pipeline_validates_right_and_lists_its_loss(tmp_path: Path) -> None:
    """BatchNorm (the default norm) on the last stage: val_loss finite, accuracy far above chance (0.1), and
    `gpumon runs --json` shows the loss that only the last stage reports."""
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}

    def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "gpumon", *args]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)

    done = gpumon("launch", "pipeline", "--follow", "--", "--epochs", "3", "--no-checkpoint")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "finished, exit code 0]" in done.stdout
    (run,) = json.loads(gpumon("runs", "--json").stdout)["runs"]
    last_stage = gpumon("logs", run["id"], "--rank", "1").stdout
    vals = [(float(a), float(b)) for a, b in re.findall(r"val_loss (\S+) val_acc (\S+)", last_stage)]
    assert len(vals) == 3, last_stage
    assert all(math.isfinite(loss) for loss, _ in vals), vals
    assert vals[-1][1] > 0.8, vals  # model-parallel reaches ~0.95 on digits in 3 epochs
    train = [float(x) for x in re.findall(r"^epoch \d+ step \d+ loss (\S+)", last_stage, re.M)]
    assert isinstance(run["loss"], float) and run["loss"] == pytest.approx(train[-1], abs=0.5)
    assert run["step"] == 75  # 25 full batches of 64 a epoch
    # Each stage told gpumon how many steps it would take: the doctor's horizon for memory growth.
    plans = {e["src"]: e["steps"] for e in EventReader(Path(run["dir"])).poll() if e["type"] == "plan"}
    assert plans == {"rank0": 75, "rank1": 75}
