"""Every training process of a run is a rank, however the script started it; helpers write nothing.

Each test launches a tiny script of its own as a user would (``gpumon launch script ...``) and
reads the run's event files: which processes wrote, as which rank, with what steps, and the
loss each rank's backward started from, against the losses the script printed itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from gpumon.core.doctor.report import diagnose
from gpumon.core.events import EventReader
from gpumon.core.runs.record.store import RunRecord, RunStore
from gpumon.core.runs.supervision.launcher import BOOTSTRAP_DIR, wait
from tests.ports import free_port

pytest.importorskip("torch")

LOSSES = """
def losses_file(out, tag):
    return open(os.path.join(out, f"losses.{tag}.txt"), "w")


def note_worker(_):  # a DataLoader worker says it exists
    with open(os.path.join(os.environ["OUT"], "workers.txt"), "a") as fh:
        fh.write(f"{os.getpid()}\\n")
"""

SPAWN_DDP = (
    """
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
"""
    + LOSSES
    + """

def main_worker(rank, world, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data), num_workers=1, worker_init_fn=note_worker)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with losses_file(out, rank) as fh:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            fh.write(f"{loss.item()!r}\\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main_worker, args=(2, int(sys.argv[1]), os.environ["OUT"]), nprocs=2)
"""
)

ACCELERATE = """
import os
import torch
from accelerate import Accelerator

acc = Accelerator(cpu=True)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)
model, opt, loader = acc.prepare(model, opt, loader)
with open(os.path.join(os.environ["OUT"], f"losses.{acc.process_index}.txt"), "w") as fh:
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        fh.write(f"{loss.item()!r}\\n")
acc.wait_for_everyone()
torch.distributed.destroy_process_group()
"""

MP_CHILDREN = (
    """
import multiprocessing as mp, os, sys
import torch
"""
    + LOSSES
    + """

def train(tag, out):
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with losses_file(out, tag) as fh:
        for _ in range(6):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            fh.write(f"{loss.item()!r}\\n")
    with open(os.path.join(out, f"pid.{tag}"), "w") as fh:
        fh.write(str(os.getpid()))


if __name__ == "__main__":
    for method in sys.argv[1:]:  # one after the other: index 0, 1, 2 in this order
        child = mp.get_context(method).Process(target=train, args=(method, os.environ["OUT"]))
        child.start()
        child.join()
        assert child.exitcode == 0, child.exitcode
"""
)

PLAIN_WITH_CHILD = (
    """
import os, subprocess, sys
import torch
from torch.utils.data import DataLoader, TensorDataset
"""
    + LOSSES
    + """

if __name__ == "__main__":
    out = os.environ["OUT"]
    data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=4, num_workers=2, worker_init_fn=note_worker)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with losses_file(out, "main") as fh:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            fh.write(f"{loss.item()!r}\\n")
    if len(sys.argv) > 1:
        subprocess.run([sys.executable, sys.argv[1]], check=True)
"""
)

AMP_CHILD = """
import os
import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
with open(os.path.join(os.environ["OUT"], "losses.amp.txt"), "w") as fh:
    for _ in range(6):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()  # backward starts from loss * 1024
        scaler.step(opt)
        scaler.update()
        fh.write(f"{loss.item()!r}\\n")
with open(os.path.join(os.environ["OUT"], "pid.amp"), "w") as fh:
    fh.write(str(os.getpid()))
"""


def run(tmp_path: Path, script: str, *args: str, module: str | None = None, timeout: float = 240) -> RunRecord:
    """``gpumon launch script`` as a user types it, then wait for the end; every step recorded."""
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
    env.pop("GPUMON_RUN_DIR", None)
    argv = [sys.executable, "-m", "gpumon", "launch", "script"]
    argv += ["--module", module] if module else [str(path)]
    argv += ["--env", "GPUMON_STEP_RATE=0", "--env", f"OUT={out}", "--json", "--", *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=tmp_path)
    run_dir = json.loads(done.stdout.splitlines()[-1])["dir"]
    os.environ["GPUMON_HOME"] = env["GPUMON_HOME"]
    try:
        store = RunStore()
        record = store.load(Path(run_dir))
        assert record is not None
        final = wait(record, store, timeout=timeout)
    finally:
        del os.environ["GPUMON_HOME"]
    assert final.state == "finished", final.log_path(0).read_text()[-3000:]
    return final


def by_source(record: RunRecord) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for event in EventReader(record.dir).poll():
        out[event["src"]].append(event)
    return dict(out)


def printed(tmp_path: Path, tag: object) -> list[float]:
    return [float(line) for line in (tmp_path / "out" / f"losses.{tag}.txt").read_text().split()]


def backward_losses(events: list[dict]) -> list[float]:
    return [e["metrics"]["loss"] for e in events if e["type"] == "metrics" and e.get("source") == "backward"]


def steps(events: list[dict]) -> list[int]:
    return [e["step"] for e in events if e["type"] == "step"]


def proc_start(events: list[dict]) -> dict:
    (start,) = [e for e in events if e["type"] == "proc_start"]
    return start


def worker_pids(tmp_path: Path) -> set[int]:
    return {int(p) for p in (tmp_path / "out" / "workers.txt").read_text().split()}


def test_mp_spawn_ddp_workers_are_two_ranks_and_their_dataloader_workers_write_nothing(tmp_path: Path) -> None:
    record = run(tmp_path, SPAWN_DDP, str(free_port()))
    sources = by_source(record)
    assert sorted(sources) == ["launcher", "rank0", "rank1"]
    pids = {src: {e["pid"] for e in events} for src, events in sources.items() if src != "launcher"}
    assert all(len(p) == 1 for p in pids.values()) and pids["rank0"] != pids["rank1"]
    workers = worker_pids(tmp_path)  # a spawned worker a rank (each imports torch: one is enough to show it)
    assert len(workers) == 2 and not workers & (pids["rank0"] | pids["rank1"])  # both ran; neither wrote
    for rank in (0, 1):
        events = sources[f"rank{rank}"]
        start = proc_start(events)
        assert (start["rank"], start["rank_from"], start["world_size"]) == (rank, "group", 2)
        assert start["started"] == "multiprocessing spawn"
        assert steps(events) == list(range(1, 9))  # 64 samples, 2 ranks, batches of 4
        assert all(e["heap"] > 0 and e["rss"] > 0 for e in events if e["type"] == "step")
        assert backward_losses(events) == pytest.approx(printed(tmp_path, rank), rel=1e-6)
    assert "no process" not in diagnose(record).headline()


def test_accelerate_launch_multi_process_on_cpu_is_two_ranks(tmp_path: Path) -> None:
    pytest.importorskip("accelerate", reason="accelerate is not installed (pip install -c constraints.txt accelerate)")
    flags = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no"]
    flags += ["--dynamo_backend", "no", "--main_process_port", str(free_port())]
    record = run(tmp_path, ACCELERATE, *flags, str(tmp_path / "train.py"), module="accelerate.commands.launch")
    sources = by_source(record)
    assert sorted(sources) == ["launcher", "rank0", "rank1"]  # accelerate's own agent is no rank
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
    listed = subprocess.run([sys.executable, "-m", "gpumon", "runs", "--json"], env=env, capture_output=True, text=True)
    (row,) = json.loads(listed.stdout)["runs"]
    assert row["program"] == "train.py via accelerate launch", row["program"]  # the script, not the launcher
    for rank in (0, 1):
        events = sources[f"rank{rank}"]
        assert proc_start(events)["started"] == "torchelastic"
        assert steps(events) == list(range(1, 9))
        assert backward_losses(events) == pytest.approx(printed(tmp_path, rank), rel=1e-6)


def test_multiprocessing_fork_spawn_and_forkserver_children_that_train_are_ranks(tmp_path: Path) -> None:
    record = run(tmp_path, MP_CHILDREN, "fork", "spawn", "forkserver")
    sources = by_source(record)
    assert sorted(sources) == ["launcher", "rank0", "rank1", "rank2"]  # the parent never stepped: silent
    for rank, method in enumerate(("fork", "spawn", "forkserver")):
        events = sources[f"rank{rank}"]
        start = proc_start(events)
        assert start["pid"] == int((tmp_path / "out" / f"pid.{method}").read_text())
        assert (start["rank_from"], start["started"]) == ("index", f"multiprocessing {method}")
        assert steps(events) == list(range(1, 7))  # a fork child counts its own steps from 1
        assert backward_losses(events) == pytest.approx(printed(tmp_path, method), rel=1e-6)


def test_a_plain_script_with_dataloader_workers_and_an_amp_subprocess_child(tmp_path: Path) -> None:
    child = tmp_path / "amp_child.py"
    child.write_text(AMP_CHILD)
    record = run(tmp_path, PLAIN_WITH_CHILD, str(child))
    sources = by_source(record)
    assert sorted(sources) == ["launcher", "rank0", "rank1"]
    main, amp = sources["rank0"], sources["rank1"]
    assert proc_start(main)["pid"] == record.status["pid"] and proc_start(main)["started"] == "exec"
    assert not worker_pids(tmp_path) & {e["pid"] for e in main}
    assert steps(main) == list(range(1, 9))
    assert backward_losses(main) == pytest.approx(printed(tmp_path, "main"), rel=1e-6)
    start = proc_start(amp)
    assert start["pid"] == int((tmp_path / "out" / "pid.amp").read_text()) and start["ppid"] == record.status["pid"]
    assert backward_losses(amp) == pytest.approx(printed(tmp_path, "amp"), rel=1e-6)  # un-scaled: not x1024


NEVER_STEPS = """
import subprocess, sys, time
import torch
subprocess.run([sys.executable, "-c", "import torch; torch.nn.Linear(2, 2)(torch.ones(2))"], check=True)
time.sleep(5.5)  # longer than the doctor's start-up finding needs (goodput.py): a run that never trained has none
"""


def test_the_doctor_says_never_stepped_only_when_no_process_stepped_and_names_what_it_saw(tmp_path: Path) -> None:
    record = run(tmp_path, NEVER_STEPS)
    assert sorted(by_source(record)) == ["launcher"]  # neither process is a rank
    diagnosis = diagnose(record)
    headline = diagnosis.headline()
    assert headline.startswith("no memory samples: no process of the run stepped")
    assert diagnosis.time == () and not [a for a in diagnosis.advice if a.key == "startup"], diagnosis.time
    assert f"pid {record.status['pid']}" in headline


LATE_GROUP = """
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def step(model, opt):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def main_worker(rank, port, out):
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    flag = os.path.join(out, "rank1-stepped")
    end = time.monotonic() + 600  # a rank 1 that died first never leaves rank 0 waiting for good
    while rank == 0 and not os.path.exists(flag) and time.monotonic() < end:  # rank 1 steps first: index 0
        time.sleep(0.01)
    step(model, opt)  # a warm-up step before any process group
    if rank == 1:
        open(flag, "w").close()
    with open(os.path.join(out, f"pid.{rank}"), "w") as fh:
        fh.write(str(os.getpid()))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for _ in range(4):
        step(model, opt)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main_worker, args=(int(sys.argv[1]), os.environ["OUT"]), nprocs=2)
"""


def test_a_process_group_created_after_the_first_step_renames_the_rank(tmp_path: Path) -> None:
    record = run(tmp_path, LATE_GROUP, str(free_port()))
    events = [e for e in EventReader(record.dir).poll() if e["src"] != "launcher"]
    for rank in (0, 1):
        pid = int((tmp_path / "out" / f"pid.{rank}").read_text())
        mine = [e for e in events if e["pid"] == pid]
        first, renamed = [e for e in mine if e["type"] == "proc_start"]
        assert (first["rank"], first["rank_from"]) == (1 - rank, "index")  # claimed in stepping order
        assert (renamed["rank"], renamed["rank_from"], renamed["renamed_from"]) == (rank, "group", 1 - rank)
        assert {e["src"] for e in mine if e["t"] >= renamed["t"]} == {f"rank{rank}"}
        assert [e["step"] for e in mine if e["type"] == "step"] == [1, 2, 3, 4, 5]  # the count goes on


@pytest.mark.parametrize("value", [0.25, 1e-300, 3.0, float("nan"), float("inf"), float("-inf")])
def test_the_hand_formatted_loss_event_reads_as_the_protocol_encodes_it(value: float) -> None:
    from gpumon.core.events import encode
    from gpumon.telemetry.loss import metrics_line

    ours = json.loads(metrics_line("rank3", 7, value, 12.5, os.getpid()))
    fields = {"step": 7, "metrics": {"loss": value}, "source": "backward"}
    protocol = json.loads(encode("metrics", "rank3", fields, 12.5))
    assert ours == protocol


FAILS_BEFORE_STEPPING = """
import torch
raise RuntimeError("no data found in ./data")
"""


def test_a_first_process_that_fails_before_stepping_still_records_its_exception(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(FAILS_BEFORE_STEPPING)
    env = {**os.environ, "GPUMON_RUN_DIR": str(tmp_path / "run"), "PYTHONPATH": BOOTSTRAP_DIR}
    done = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True)
    assert "RuntimeError: no data found" in done.stderr
    (event,) = EventReader(tmp_path / "run").poll()
    assert (event["src"], event["type"], event["message"]) == ("main", "exception", "no data found in ./data")


def test_a_rank_held_by_a_live_process_is_never_taken_twice_but_a_dead_holders_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpumon.telemetry import ranks

    monkeypatch.setattr(ranks, "_identity", None)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    claims = tmp_path / ranks.CLAIMS_DIR
    claims.mkdir()
    (claims / "0").write_text(str(os.getppid()))  # rank 0 is alive: we inherited its RANK
    inherited = ranks.decide(str(tmp_path))
    assert (inherited.rank, inherited.origin) == (2, "index")  # past the launcher's ranks
    assert (claims / "2").read_text() == str(os.getpid())

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (claims / "0").write_text(dead.stdout.strip())  # rank 0 died: this is its restart
    restarted = ranks.decide(str(tmp_path))
    assert (restarted.rank, restarted.origin) == (0, "env")
    assert (claims / "0").read_text() == str(os.getpid())
