"""What measuring the data wait costs a step, and how many steps it takes gpumon to say a run is input-bound
or its loss NaN (issue 24).

cost: in one interpreter, batches from a DataLoader over an in-memory TensorDataset (batch 1: the cheapest
batch torch makes, so the hook's share is the largest it can be), timed without and then with
``feeding.hook_dataloader`` (the bootstrap's hook); the difference per batch, median of ``--repeats``. Then
the per-record work the step events gained (lr, the loaders, the thread count), per recorded step.

latency: real runs through ``gpumon launch script`` in a scratch state dir: tests/data/scripts/input_bound.py
(num_workers=0) and tests/data/scripts/nan_lr.py (lr 1e6); the step of the first ``alert`` against the step
the problem began (the first step; the first NaN step).

Usage: python bench/feeding.py [cost] [latency] [--batches 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "data" / "scripts"


def cost(batches: int, repeats: int) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from gpumon.telemetry.feeding import Feed, hook_dataloader, optimizer_lr, timed_next

    class Batches:  # the wrapper alone, around the cheapest __next__ there is
        def __next__(self) -> int:
            return 1

    one = Feed()
    one.seen = True
    timed = timed_next(Batches.__next__, lambda: one)
    plain_calls, it, n = Batches.__next__, Batches(), 1_000_000
    bare = min(timeit.timeit(lambda: plain_calls(it), number=n) for _ in range(repeats)) / n
    wrapped = min(timeit.timeit(lambda: timed(it), number=n) for _ in range(repeats)) / n
    print(f"the wait measurement alone: {(wrapped - bare) * 1e6:.2f} us a batch (goal: within 5 us a step)")

    data = TensorDataset(torch.randn(batches, 8))

    def run() -> float:
        loader = DataLoader(data, batch_size=1)
        start = time.perf_counter()
        for _ in loader:
            pass
        return (time.perf_counter() - start) / batches

    from torch.utils.data.dataloader import _BaseDataLoaderIter

    feed = Feed()
    plain = _BaseDataLoaderIter.__next__
    hook_dataloader(torch, lambda: feed)
    hooked = _BaseDataLoaderIter.__next__
    run()  # warm-up: the first pass pays for imports and allocations
    times: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(repeats):  # interleaved: a machine that slows down slows both arms
        for arm, method in (("without", plain), ("with", hooked)):
            _BaseDataLoaderIter.__next__ = method  # type: ignore[method-assign]
            times[arm].append(run())
    without, with_hook = statistics.median(times["without"]), statistics.median(times["with"])
    print(f"DataLoader batch (batch 1, in memory): {without * 1e6:.2f} us without, {with_hook * 1e6:.2f} us with")
    print(f"  difference: {(with_hook - without) * 1e6:+.2f} us a batch (this VM's run-to-run spread is a few us)")

    optimizer = torch.optim.SGD(torch.nn.Linear(4, 4).parameters(), lr=0.01)
    n = 100_000
    start = time.perf_counter()
    for _ in range(n):
        optimizer_lr(optimizer)
        feed.take_wait()
        feed.thread_change(torch)
    per = (time.perf_counter() - start) / n
    print(f"  per recorded step (lr, wait, thread check): {per * 1e6:.2f} us (at most 200 recorded steps a second)")


def launch(home: Path, script: str, *args: str) -> str:
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "launch", "script", str(SCRIPTS / script), "--", *args],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.split()[-1]


def events(run_dir: Path) -> list[dict]:
    out = []
    for path in sorted((run_dir / "events").glob("*.jsonl*")):
        if path.suffix == ".gz":
            import gzip

            text = gzip.decompress(path.read_bytes()).decode()
        else:
            text = path.read_text()
        out += [json.loads(line) for line in text.splitlines() if line.strip()]
    return sorted(out, key=lambda e: e["t"])


def wait_end(home: Path, run_id: str) -> Path:
    run_dir = home / "runs" / run_id
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status = json.loads((run_dir / "status.json").read_text() or "{}")
        if status.get("state") in ("finished", "failed", "stopped", "killed") and (run_dir / "summary.json").exists():
            return run_dir
        time.sleep(0.5)
    raise SystemExit(f"{run_id} did not end")


def latency() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        slow = launch(home, "input_bound.py", "--workers", "0", "--steps", "120")
        nan = launch(home, "nan_lr.py", "--lr", "1e6", "--steps", "400", "--out", str(home / "first_bad"))
        for run_id, what in ((slow, "input-bound"), (nan, "loss is")):
            got = events(wait_end(home, run_id))
            alert = next(e for e in got if e["type"] == "alert" and e["text"].startswith(what))
            steps = [e for e in got if e["type"] == "step" and e["t"] <= alert["t"]]
            step_at = max((e["step"] for e in steps), default=0)
            if what == "input-bound":
                first_t = min(e["t"] for e in got if e["type"] == "step")
                print(f"input-bound: alert at step {step_at}, {alert['t'] - first_t:.1f} s after the first step")
                print(f"  {alert['text']}")
            else:
                first_bad = int((home / "first_bad").read_text())
                print(f"NaN: first bad step {first_bad}, alert at step {step_at} ({step_at - first_bad} steps later)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("parts", nargs="*", default=["cost", "latency"])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if "cost" in args.parts:
        cost(args.batches, args.repeats)
    if "latency" in args.parts:
        latency()


if __name__ == "__main__":
    main()
