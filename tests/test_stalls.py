"""Stalls with real processes: a DDP rank that blocks in its own data function, a SIGSTOPped rank, and a run
that pauses for a long eval (no stall) and then without one (a stall that ends).

The rule's minimum is 4 s here (``GPUMON_STALL_AFTER``) instead of 120 s, so the tests wait seconds; the
steps take ~20 ms, so 20 x the median step stays below it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.events import EventReader
from gpumon.core.runs.launcher import free_port

pytest.importorskip("torch")

DEADLINE_S = 120.0

DDP_HANG = """
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def next_batch(rank, step):
    if rank == 1 and step == 6:
        time.sleep(3600)  # rank 1 hangs in its own data code
    return torch.randn(8, 16), torch.randn(8, 1)


def worker(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 100000):
        x, y = next_batch(rank, step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.02)


if __name__ == "__main__":
    mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2)
"""

STEPS_FOREVER = """
import time
import torch

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)
"""

PAUSES = """
import time
import torch

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def train(steps):
    model.train()
    for _ in range(steps):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.02)


train(30)
model.eval()  # a long evaluation: a known pause
with torch.no_grad():
    time.sleep(9)
train(30)
time.sleep(9)  # the same pause with no sign of one: a stall, which ends when stepping resumes
train(30)
"""


def line_of(script: str, text: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(script).splitlines(), 1) if text in line)


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": "", "GPUMON_STALL_AFTER": "4"}
    env.pop("GPUMON_RUN_DIR", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, cwd=tmp_path
        )

    return run


@pytest.fixture
def launched(tmp_path: Path, cli: Callable[..., Any]) -> Iterator[Callable[..., dict[str, Any]]]:
    """Start a script as a run; every run is stopped at the end, whatever the test's outcome."""
    ids: list[str] = []

    def launch(script: str, *args: str) -> dict[str, Any]:
        path = tmp_path / "train.py"
        path.write_text(textwrap.dedent(script))
        done = cli("launch", "script", str(path), "--json", "--", *args)
        assert done.returncode == 0, done.stderr
        info = json.loads(done.stdout.splitlines()[-1])
        ids.append(info["id"])
        return info

    yield launch
    for run_id in ids:
        cli("stop", run_id)


def row(cli: Callable[..., Any], run_id: str) -> dict[str, Any]:
    done = cli("runs", "--json")
    return next(r for r in json.loads(done.stdout)["runs"] if r["id"] == run_id)


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def launcher_events(run_dir: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in EventReader(Path(run_dir)).poll() if e["type"] == kind and e["src"] == "launcher"]


def test_a_ddp_rank_blocked_in_its_data_function_is_a_stall_with_each_ranks_place(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any]
) -> None:
    info = launched(DDP_HANG, str(free_port()))
    stalled = wait_for(lambda: (r := row(cli, info["id"]))["status"] == "stalled" and r, "the stalled state")
    sleep_line = line_of(DDP_HANG, "time.sleep(3600)")
    backward_line = line_of(DDP_HANG, "loss.backward()")
    stall = stalled["stall"]
    assert stall["step"] == 5 and stall["verdict"] == "diverged" and stall["blame"] == [1]
    assert stall["where"] == [
        f"rank 0 waits in all_reduce (DDP backward) at train.py:{backward_line}, for rank 1",
        f"rank 1 waits in next_batch at train.py:{sleep_line} (time.sleep)",
    ]
    kept = Path(info["dir"]) / stall["stacks"]
    assert f'train.py", line {sleep_line} in next_batch' in kept.read_text()
    doctor = cli("doctor", info["id"]).stdout
    assert "diverged-rank hang: rank 1 never reached the all_reduce that rank 0 waits in" in doctor.splitlines()[0]
    assert f"rank 1 waits in next_batch at train.py:{sleep_line} (time.sleep)" in doctor
    alerts = launcher_events(info["dir"], "alert")
    assert [a.get("alert_kind", a.get("kind")) for a in alerts] == ["stalled"] and "at step 5" in alerts[0]["text"]


def test_a_sigstopped_rank_is_said_plainly_and_the_stall_ends_on_sigcont(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any]
) -> None:
    info = launched(STEPS_FOREVER)
    wait_for(lambda: (row(cli, info["id"])["step"] or 0) >= 5, "steps")
    pid = next(int(p.name.split(".")[1]) for p in (Path(info["dir"]) / "events").glob("rank0.*.jsonl"))
    os.kill(pid, signal.SIGSTOP)
    try:
        stalled = wait_for(lambda: (r := row(cli, info["id"]))["status"] == "stalled" and r, "the stalled state")
        said = f"rank 0 (pid {pid}) is stopped (SIGSTOP): `kill -CONT {pid}`"
        assert stalled["stall"]["where"] == [said]
        assert said in cli("doctor", info["id"]).stdout.splitlines()[0]
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = wait_for(lambda: (r := row(cli, info["id"]))["status"] == "running" and r, "the stall's end")
    assert resumed["stall"] is None and resumed["last_stall"]["lasted_s"] >= 4
    assert "last stall:" in cli("doctor", info["id"]).stdout


def test_a_long_eval_is_no_stall_and_the_same_pause_without_one_is_a_stall_that_ends(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any]
) -> None:
    info = launched(PAUSES)
    wait_for(lambda: row(cli, info["id"])["status"] == "finished", "the run's end", timeout=180)
    stalls, ends = launcher_events(info["dir"], "stall"), launcher_events(info["dir"], "stall_end")
    assert [s["step"] for s in stalls] == [60]  # not at step 30, where the eval began
    assert len(ends) == 1 and 4 <= ends[0]["lasted_s"] <= 30 and ends[0]["step"] > 60
    assert [a.get("alert_kind", a.get("kind")) for a in launcher_events(info["dir"], "alert")] == ["stalled"]
    done = row(cli, info["id"])
    assert done["last_stall"]["lasted_s"] == ends[0]["lasted_s"]
