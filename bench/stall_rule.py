"""The stall rule from real runs, and how soon a stall is known.

Part 1 (``rule``): real training runs under ``gpumon launch`` (gpumon's DDP trainer with its per-epoch
evaluation and checkpoint, a Lightning run with a validation loop and checkpointing, an HF Trainer with
evaluation and saves every few steps). From each rank's ``step`` and ``phase`` events: the median step, the
largest gap between recorded steps outside a known pause and across one (eval / save), each also as a
multiple of the median, and the first step's time from the rank's start. The rule must not fire on any
normal gap, and a pause must be seen as one.

Part 2 (``onset``): a 2-rank ``mp.spawn`` DDP whose rank 1 blocks in its data function after 5 steps,
with ``GPUMON_STALL_AFTER`` = 5 s: the ``stall`` event's time minus the last step's (its ``since``), which
must lie within the rule's window plus one supervisor pass (2 s) plus the stack capture (<= 3 s); and
``StallWatch``'s per-pass cost (a psutil status read per rank).

Usage: python bench/stall_rule.py [rule] [onset] [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

PASS_S, CAPTURE_S = 2.0, 3.0

LIGHTNING = """
import lightning as L, torch

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

torch.manual_seed(0)
def loader(n):
    data = torch.utils.data.TensorDataset(torch.randn(n, 64), torch.randn(n, 1))
    return torch.utils.data.DataLoader(data, batch_size=16)
trainer = L.Trainer(max_epochs=4, accelerator="cpu", devices=1, enable_progress_bar=False, logger=False,
                    default_root_dir="lt_out")
trainer.fit(Tiny(), loader(1600), loader(3200))
"""

HF = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, 64, (n, 32), generator=torch.Generator().manual_seed(0))
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=64, n_layer=2, n_head=2))
args = TrainingArguments(output_dir="hf_out", max_steps=120, logging_steps=10, per_device_train_batch_size=8,
                         eval_strategy="steps", eval_steps=40, per_device_eval_batch_size=8, save_strategy="steps",
                         save_steps=60, report_to=[], use_cpu=True, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Tokens(512), eval_dataset=Tokens(1024)).train()
"""

DDP_HANG = """
import sys, time, torch
import torch.distributed as dist, torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

def next_batch(rank, step):
    if rank == 1 and step == 6:
        time.sleep(3600)
    return torch.randn(8, 16), torch.randn(8, 1)

def worker(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 100000):
        x, y = next_batch(rank, step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.02)

if __name__ == "__main__":
    mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2)
"""


def gpumon(home: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    full = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    full.pop("GPUMON_RUN_DIR", None)
    done = subprocess.run([sys.executable, "-m", "gpumon", *args], env=full, capture_output=True, text=True, cwd=cwd)
    if done.returncode not in (0, 1):
        raise SystemExit(f"gpumon {' '.join(args)}: {done.stderr}")
    return done.stdout


def events(run_dir: Path) -> list[dict[str, Any]]:
    from gpumon.core.events import EventReader

    return list(EventReader(run_dir).each())


def wait_end(home: Path, run_id: str, timeout: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = next(r for r in json.loads(gpumon(home, "runs", "--json"))["runs"] if r["id"] == run_id)
        if row["status"] not in ("starting", "running", "stalled", "stopping"):
            return row
        time.sleep(1)
    raise SystemExit(f"{run_id} did not end in {timeout} s")


def gaps(evs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per rank: median dt, the largest step-to-step gap outside and across a pause, the first step's delay."""
    out = {}
    for src in sorted({e["src"] for e in evs if e["src"].startswith("rank")}):
        mine = [e for e in evs if e["src"] == src]
        steps = [e for e in mine if e["type"] == "step"]
        dts = [e["dt"] for e in steps if e.get("dt")]
        if len(steps) < 3:
            continue
        start = next((e["t"] for e in mine if e["type"] == "proc_start"), steps[0]["t"])
        normal, paused = 0.0, 0.0
        for a, b in itertools.pairwise(steps):
            between = [e for e in mine if e["type"] == "phase" and a["t"] <= e["t"] <= b["t"]]
            gap = b["t"] - a["t"]
            if any(e["phase"] in ("eval", "save") for e in between):
                paused = max(paused, gap)
            else:
                normal = max(normal, gap)
        med = statistics.median(dts)
        out[src] = {
            "steps": len(steps),
            "median_s": round(med, 4),
            "max_normal_s": round(normal, 3),
            "normal_x": round(normal / med, 1),
            "max_pause_s": round(paused, 3),
            "pause_x": round(paused / med, 1),
            "first_step_s": round(steps[0]["t"] - start, 2),
            "phases": sorted({e["phase"] for e in mine if e["type"] == "phase"}),
        }
    return out


def rule(work: Path) -> None:
    home = work / "home"
    cases: list[tuple[str, list[str]]] = [("gpumon ddp trainer (2 ranks, mlp, 3 epochs)", ["ddp", "--", "--arch=mlp"])]
    for name, text, need in (("lightning (validation, checkpoints)", LIGHTNING, "lightning"),
                             ("hf trainer (eval, saves)", HF, "transformers")):  # fmt: skip
        try:
            __import__(need)
        except ImportError:
            print(f"{name}: skipped ({need} not installed)")
            continue
        path = work / f"run_{need}.py"  # not lightning.py: it would import itself as lightning
        path.write_text(textwrap.dedent(text))
        cases.append((name, ["script", str(path)]))
    for name, argv in cases:
        out = gpumon(home, "launch", argv[0], "--json", *argv[1:], cwd=work)
        info = json.loads(out.splitlines()[-1])
        row = wait_end(home, info["id"])
        stalls = [e for e in events(Path(info["dir"])) if e["type"] == "stall"]
        print(f"{name}: {row['status']}, stalls at the default rule: {len(stalls)}")
        for src, numbers in gaps(events(Path(info["dir"]))).items():
            print(f"  {src}: {json.dumps(numbers)}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stall_event(home: Path, work: Path, path: Path, *args: str, after: float, timeout: float) -> dict[str, Any]:
    """Launch ``path`` as a run with the stall rule's minimum at ``after`` s, wait for its ``stall`` event, stop it."""
    out = gpumon(home, "launch", "script", str(path), "--json", "--", *args,
                 env={"GPUMON_STALL_AFTER": str(after)}, cwd=work)  # fmt: skip
    info = json.loads(out.splitlines()[-1])
    deadline, stall = time.monotonic() + timeout, None
    while stall is None and time.monotonic() < deadline:
        time.sleep(0.5)
        stall = next((e for e in events(Path(info["dir"])) if e["type"] == "stall"), None)
    gpumon(home, "stop", info["id"])
    if stall is None:
        raise SystemExit(f"no stall event in {timeout:.0f} s")
    return stall


def onset(work: Path, repeat: int) -> None:
    home, after = work / "home-onset", 5.0
    path = work / "ddp_hang.py"
    path.write_text(textwrap.dedent(DDP_HANG))
    late = []
    for _ in range(repeat):
        stall = stall_event(home, work, path, str(free_port()), after=after, timeout=180)
        known = stall["t"] - stall["since"]
        late.append(known)
        print(f"  stall known {known:.2f} s after the last step (window {stall['window_s']:.1f} s): {stall['verdict']}")
    limit = after + PASS_S + CAPTURE_S
    print(f"onset: median {statistics.median(late):.2f} s, max {max(late):.2f} s; bound {limit:.1f} s "
          f"(window + pass + capture): {'ok' if max(late) <= limit else 'OVER'}")  # fmt: skip
    import psutil

    from gpumon.core.runs.supervision.stacks import proc_state

    me = os.getpid()
    started = time.perf_counter()
    for _ in range(2000):
        proc_state(me)
    cost = (time.perf_counter() - started) / 2000 * 1e6
    print(f"per-pass cost: {cost:.0f} us per rank and pass (psutil {psutil.__version__})")


STUCK_WORKERS = """
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset


class Files(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        if i >= 400:
            time.sleep(3600)  # every worker is stuck in its next batch past sample 400
        return torch.randn(16), torch.randn(1)


model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Files(), batch_size=8, num_workers=int(sys.argv[1])):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)
"""


def workers(work: Path, counts: list[int]) -> None:
    """A rank stalled in its DataLoader with every worker stuck: how long the workers' stacks add to the
    capture, and how many are named."""
    home, after = work / "home-workers", 5.0
    path = work / "stuck_workers.py"
    path.write_text(textwrap.dedent(STUCK_WORKERS))
    for count in counts:
        stall = stall_event(home, work, path, str(count), after=after, timeout=300)
        where = " ".join(stall.get("where") or ())
        more = re.search(r"\+(\d+) more", where)
        named = where.count("waits in __getitem__") + (int(more.group(1)) if more else 0)
        unread = re.search(r"worker\(s\) ([\d, ]+) not read", where)
        capture = stall["t"] - stall["since"] - stall["window_s"]
        print(
            f"  {count:2d} workers: {named} found stuck in __getitem__ ({'some not read' if unread else 'all read'}); "
            f"stall known {capture:.2f} s after its window (one pass {PASS_S:.0f} s + the capture)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("parts", nargs="*", default=["rule", "onset"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="*", default=[2, 8, 16])
    args = parser.parse_args()
    print(f"{platform.node()} {platform.python_version()} {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "rule" in args.parts:
            rule(work)
        if "onset" in args.parts:
            onset(work, args.repeat)
        if "workers" in args.parts:
            workers(work, args.workers)


if __name__ == "__main__":
    main()
