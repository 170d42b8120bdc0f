"""Stalls with real processes: a DDP rank that blocks in its own data function, a SIGSTOPped rank, and a run
that pauses for a long eval (no stall) and then without one (a stall that ends).

The rule's minimum is 4 s here (``GPUMON_STALL_AFTER``) instead of 120 s, so the tests wait seconds; the
steps take ~20 ms, so 20 x the median step stays below it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpumon.core.events import EventReader
from tests.conftest import run_state, wait_state
from tests.ports import free_port

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
    mp.start_processes(worker, args=(int(sys.argv[1]),), nprocs=2, start_method=sys.argv[2])
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


OWN_USR2 = """
import signal, sys, time
import torch


def requeue(signum, frame):  # a Slurm/SGE job's checkpoint-and-requeue hook on SIGUSR2
    open(sys.argv[1], "w").close()
    sys.exit(3)


def wait_for_data():
    time.sleep(3600)


signal.signal(signal.SIGUSR2, requeue)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 100000):
    if step == 8:
        wait_for_data()
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)
"""


STUCK_WORKER = """
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset


class Files(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        if i == 200:
            time.sleep(3600)  # one sample's read never returns (a hung network mount)
        return torch.randn(16), torch.randn(1)


if __name__ == "__main__":
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Files(), batch_size=8, num_workers=2, multiprocessing_context=sys.argv[1])
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.02)
"""


def line_of(script: str, text: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(script).splitlines(), 1) if text in line)


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}
        env["GPUMON_STALL_AFTER"] = "4"
        env.pop("GPUMON_RUN_DIR", None)
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


def row_when(cli: Callable[..., Any], info: dict[str, Any], state: str, timeout: float = DEADLINE_S) -> dict[str, Any]:
    """The CLI's row once the run is in ``state``: waited for in this process (conftest.wait_state), then asked of
    `gpumon runs --json`, whose row the tests assert on."""
    wait_state(info["dir"], state, timeout=timeout)
    return wait_for(lambda: (r := row(cli, info["id"]))["status"] == state and r, f"the CLI's {state} row", 30)


def launcher_events(run_dir: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in EventReader(Path(run_dir)).poll() if e["type"] == kind and e["src"] == "launcher"]


@pytest.mark.parametrize("start", ["spawn", "fork"])  # fork: Lightning's ddp_fork, notebooks
def test_a_ddp_rank_blocked_in_its_data_function_is_a_stall_with_each_ranks_place(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    without_py_spy(monkeypatch)  # forked ranks share their parent's file: read by signals, one at a time
    info = launched(DDP_HANG, str(free_port()), start)
    stalled = row_when(cli, info, "stalled")
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
    assert "Look at rank 1: it never reached the collective" in doctor
    alerts = launcher_events(info["dir"], "alert")
    assert [a.get("alert_kind", a.get("kind")) for a in alerts] == ["stalled"] and "at step 5" in alerts[0]["text"]
    assert ". Fix: Look at rank 1: it never reached the collective: read its log" in alerts[0]["text"]  # the doctor's


def test_a_sigstopped_rank_is_said_plainly_and_the_stall_ends_on_sigcont(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any]
) -> None:
    info = launched(STEPS_FOREVER)
    steps = EventReader(Path(info["dir"]))  # read here, each poll only what was added since the last
    wait_for(lambda: any(e["type"] == "step" and e["step"] >= 5 for e in steps.poll()), "step 5")
    # the CLI reads the supervisor's summary, folded from those events a moment later
    wait_for(lambda: (row(cli, info["id"])["step"] or 0) >= 5, "the CLI's step 5", 30)
    pid = next(int(p.name.split(".")[1]) for p in (Path(info["dir"]) / "events").glob("rank0.*.jsonl"))
    os.kill(pid, signal.SIGSTOP)
    try:
        stalled = row_when(cli, info, "stalled")
        said = f"rank 0 (pid {pid}) is stopped (SIGSTOP): `kill -CONT {pid}`"
        assert stalled["stall"]["where"] == [said]
        doctor = cli("doctor", info["id"]).stdout
        assert said in doctor.splitlines()[0]
        assert "Resume the stopped process" in doctor and f"kill -CONT {pid} (a SIGSTOP" in doctor
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = row_when(cli, info, "running")
    assert resumed["stall"] is None and resumed["last_stall"]["lasted_s"] >= 4
    assert "last stall:" in cli("doctor", info["id"]).stdout


def test_a_long_eval_is_no_stall_and_the_same_pause_without_one_is_a_stall_that_ends(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any]
) -> None:
    info = launched(PAUSES)
    row_when(cli, info, "finished", timeout=180)
    stalls, ends = launcher_events(info["dir"], "stall"), launcher_events(info["dir"], "stall_end")
    assert [s["step"] for s in stalls] == [60]  # not at step 30, where the eval began
    assert len(ends) == 1 and 4 <= ends[0]["lasted_s"] <= 30 and ends[0]["step"] > 60
    assert [a.get("alert_kind", a.get("kind")) for a in launcher_events(info["dir"], "alert")] == ["stalled"]
    done = row(cli, info["id"])
    assert done["last_stall"]["lasted_s"] == ends[0]["lasted_s"]


def stalled_with_own_handler(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any], marker: Path
) -> dict[str, Any]:
    info = launched(OWN_USR2, str(marker))

    def stalled_unharmed() -> Any:
        assert not marker.exists(), "gpumon sent SIGUSR2 to a script that handles it itself (its requeue hook ran)"
        return run_state(info["dir"]) == "stalled"

    wait_for(stalled_unharmed, "the stalled state")  # written after the stacks were taken
    stalled = row_when(cli, info, "stalled")
    assert not marker.exists() and row(cli, info["id"])["status"] == "stalled"
    return stalled


def without_py_spy(monkeypatch: pytest.MonkeyPatch) -> None:
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "py-spy").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))


def test_a_script_with_its_own_sigusr2_handler_never_gets_gpumons_signal(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_py_spy(monkeypatch)
    stalled = stalled_with_own_handler(launched, cli, tmp_path / "requeued")
    [where] = stalled["stall"]["where"]
    assert "its script handles SIGUSR2 itself, so gpumon does not send it; try py-spy dump --pid" in where


def py_spy_or_skip() -> None:
    exe = shutil.which("py-spy")
    if exe is None:
        pytest.skip("py-spy is not installed (it is in the test extra)")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"  # a Python for py-spy to find
        done = subprocess.run([exe, "dump", "--pid", str(child.pid)], capture_output=True, text=True, timeout=30)
    finally:
        child.kill()
        child.wait()
    if done.returncode != 0:
        pytest.skip(f"py-spy may not read another process here: {done.stderr.strip()[-200:]}")


def test_py_spy_reads_where_a_rank_that_keeps_its_own_sigusr2_waits(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any], tmp_path: Path
) -> None:
    py_spy_or_skip()
    stalled = stalled_with_own_handler(launched, cli, tmp_path / "requeued")
    sleep_line = line_of(OWN_USR2, "time.sleep(3600)")
    assert stalled["stall"]["where"] == [f"rank 0 waits in wait_for_data at train.py:{sleep_line} (time.sleep)"]


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_dataloader_worker_stuck_in_getitem_is_named_where_it_waits(
    launched: Callable[..., dict[str, Any]], cli: Callable[..., Any], start: str
) -> None:
    info = launched(STUCK_WORKER, start)
    stalled = row_when(cli, info, "stalled")
    loop_line, sleep_line = line_of(STUCK_WORKER, "for x, y in loader"), line_of(STUCK_WORKER, "time.sleep(3600)")
    [where] = stalled["stall"]["where"]
    rank, _, worker = where.partition(": its worker ")
    assert rank == f"rank 0 waits in <module> at train.py:{loop_line} (__next__ in dataloader.py)"
    pid, _, place = worker.partition(" ")
    assert place == f"waits in __getitem__ at train.py:{sleep_line} (time.sleep)"  # the idle worker is not named
    rank_pid = next(int(p.name.split(".")[1]) for p in (Path(info["dir"]) / "events").glob("rank0.*.jsonl"))
    assert psutil.Process(int(pid)).ppid() == rank_pid
    doctor = cli("doctor", info["id"]).stdout
    assert "Make a stuck DataLoader worker raise instead of hanging the run" in doctor
    assert "DataLoader(..., timeout=120)" in doctor
