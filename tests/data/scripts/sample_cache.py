"""A host-memory leak that is not torch's: every decoded sample's bytes are cached in a dict that never evicts
(+256 KiB a step, host RSS only; no tensor grows). The tensor census sees nothing; tracemalloc sees the line.

    decoded[index] = decode(index)   # the leak: a dict keyed by every index ever seen
    --fixed: decode through functools.lru_cache(maxsize=64) instead

No gpumon code: gpumon launch script tests/data/scripts/sample_cache.py -- --steps 2000 --step-ms 20
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--step-ms", type=float, default=0.0, help="sleep per step, to look like a slower model")
parser.add_argument("--fixed", action="store_true", help="a bounded cache (functools.lru_cache)")
args = parser.parse_args()
torch.manual_seed(0)


def decode(index: int) -> bytes:
    sample = torch.full((64, 1024), float(index % 7))  # a decoded image: 256 KiB of float32
    return sample.numpy().tobytes()  # the bytes allocated here are what the cache keeps


bounded = functools.lru_cache(maxsize=64)(decode)
decoded: dict[int, bytes] = {}
model = nn.Linear(64, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(1, args.steps + 1):
    if args.fixed:
        raw = bounded(step % 64)
    else:
        if step not in decoded:
            decoded[step] = decode(step)  # the leak: every sample ever decoded stays in the dict
        raw = decoded[step]
    x = torch.frombuffer(bytearray(raw[: 64 * 4 * 8]), dtype=torch.float32).view(8, 64)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(args.step_ms / 1000)
print(f"{len(decoded)} samples cached")
