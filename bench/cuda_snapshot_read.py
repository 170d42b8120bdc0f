"""What reading a kept CUDA snapshot costs (issue 52): ``load`` (the guarded unpickler) and ``summarise``, and
serve's page built from it, for a snapshot near the size gpumon keeps (64 MiB at most).

    PYTHONPATH=. python bench/cuda_snapshot_read.py [--blocks N]

The snapshot is made here in torch's format (no GPU): N live blocks of 6 frames each with history, spread over
segments of 16 blocks, a free block between every two. ``pickle.load`` (no guard) is the baseline.
"""

from __future__ import annotations

import argparse
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any

from gpumon.core.runs.reading.cuda_snapshot import load, summarise
from gpumon.serve.snapshot_page import page


def snapshot(blocks: int) -> dict[str, Any]:
    segments = []
    for s in range(0, blocks, 16):
        parts: list[dict[str, Any]] = []
        for b in range(s, min(blocks, s + 16)):
            frames = [{"filename": f"/venv/lib/python3.11/site-packages/torch/nn/m{k}.py", "line": b % 300 + k,
                       "name": "forward"} for k in range(5)]  # fmt: skip
            frames.append({"filename": "/home/me/train.py", "line": b % 200, "name": "train_step"})
            parts.append({"address": 2 * b, "size": 2**20, "requested_size": 2**20, "state": "active_allocated",
                          "frames": frames})  # fmt: skip
            if b % 2:
                parts.append({"address": 2 * b + 1, "size": 2**19, "requested_size": 0, "state": "inactive",
                              "frames": []})  # fmt: skip
        total = sum(p["size"] for p in parts)
        segments.append({"device": 0, "address": s, "total_size": total, "allocated_size": total, "blocks": parts})
    return {"segments": segments, "device_traces": [[]]}


def best(fn: Any, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "oom0.pickle"
        path.write_bytes(pickle.dumps(snapshot(args.blocks)))
        size = path.stat().st_size
        plain = best(lambda: pickle.loads(path.read_bytes()))
        guarded = best(lambda: load(path))
        snap = load(path)
        summary = best(lambda: summarise(snap))
        first = best(lambda: page("run", "oom0.pickle", str(path)), runs=1)  # read, summarised, drawn
        again = best(lambda: page("run", "oom0.pickle", str(path)))  # cached until the file changes
    print(f"{args.blocks:,} live blocks, {size / 2**20:.1f} MiB pickled")
    print(f"pickle.loads {plain * 1000:.0f} ms; gpumon's load {guarded * 1000:.0f} ms", end="; ")
    print(f"summarise {summary * 1000:.0f} ms")
    print(f"serve's page: first {first * 1000:.0f} ms, again {again * 1000:.2f} ms")


if __name__ == "__main__":
    main()
