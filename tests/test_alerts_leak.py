"""Issue 33, item 9: the leak alert waits (bounded) for the census the supervisor asked for, so it carries the
variable, its file:line and the fix, and says "leak" once.

A real run through ``gpumon launch`` (a script of the test's own), a webhook receiver of the test's own on 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.core.doctor.leak import LeakWatch
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.supervision.leak_alert import CENSUS_WAIT_S, LeakAlert
from tests.alert_receiver import Receiver
from tests.conftest import wait_until
from tests.test_alerts_channels import Cli
from tests.test_doctor_leak_trust import ended, line_of

GiB = 2**30

TRAIN = """import time

import torch

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
running_loss = 0.0
for step in range(100_000):
    x = torch.randn(64, 8)
    loss = sum(model(x[i : i + 1]).pow(2).mean() for i in range(64)) / 64  # a graph of ~400 nodes a step
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running_loss += loss
    time.sleep(0.005)
"""


def test_the_leak_alert_waits_for_the_census_and_names_the_variable_its_line_and_the_fix(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    receiver = Receiver().start()
    try:
        cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\n')
        (tmp_path / "train_lm.py").write_text(TRAIN)
        done = cli("launch", "script", "train_lm.py", "--env", "OMP_NUM_THREADS=1")
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.split()[-1]
        # ~270 KiB a step fills 16+ GiB within 24 h at any pace above a step a second: the horizon alerts.
        assert wait_until(lambda: [r for r in receiver.arrived if r.get("kind") == "leak"], timeout=240, step=0.2), (
            receiver.requests,
            cli.status(run_id),
        )
        cli("stop", run_id)
        ended(cli, run_id, timeout=60)
        (alert,) = [r for r in receiver.arrived if r.get("kind") == "leak"]
        where = f"train_lm.py:{line_of(TRAIN, 'running_loss += loss')}"
        assert alert["message"].startswith(f"memory leak on rank 0: `running_loss` in {where} keeps"), alert
        assert alert["cause"] == f"`running_loss` in {where}", alert
        assert "`running_loss += loss.item()`" in alert["fix"], alert
        assert "Fix: accumulate a number: `running_loss += loss.item()`" in alert["text"], alert["text"]
        for said in (alert["message"], alert["text"]):  # the chat's one line and the alert's own words
            assert said.lower().count("leak") == 1, said
    finally:
        receiver.stop()


def test_the_wait_is_bounded_and_skipped_when_no_census_can_come(tmp_path: Path) -> None:
    fold = RunTelemetry(tmp_path, use_summary=False)
    watch = LeakWatch({0: 8 * GiB})
    watch.update(fold)
    for step in range(1, 201):  # 1 MiB a step at 10 steps/s: 8 GiB fill in ~13 min, long after the wait
        fold.apply({"type": "step", "src": "rank0", "t": 1.8e9 + step / 10, "step": step, "dev": "cpu",
                    "heap": 100e6 + step * 2**20})  # fmt: skip
    states = watch.update(fold)
    assert states[0].alarm, states[0]
    waits = LeakAlert(census=True)
    assert waits.due(states, fold, now=0.0) is None and waits.due(states, fold, now=CENSUS_WAIT_S - 1) is None
    text, fields = waits.due(states, fold, now=CENSUS_WAIT_S) or ("", {})
    assert text.startswith("memory leak on rank 0: +1.0 MiB/iter") and "fix" not in fields, text
    assert waits.due(states, fold, now=CENSUS_WAIT_S + 1) is None  # once
    off = LeakAlert(census=False)  # --no-census: nothing to wait for
    assert off.due(states, fold, now=0.0) is not None
    fold.apply({"type": "census", "src": "rank0", "t": 1.8e9 + 21, "request": 1, "seq": 1, "error": "boom"})
    assert LeakAlert(census=True).due(states, fold, now=0.0) is not None  # the census failed: no cause coming
