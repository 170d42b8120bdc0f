"""A batch-size warm-up, as large-batch recipes do (no gpumon code): an MLP trained at batch 64 for WARMUP steps,
then at batch 256; through a DataLoader, or (``tensors``) on batches made in the loop. At the end it counts one
step (forward, backward, optimizer step) of a copy of the model at each batch size with FlopCounterMode and
prints ``REF <batch> <flops>``.

    python batch_warmup.py loader|tensors WARMUP STEPS
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

SIZES = (64, 256)


def batches(how: str, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    while True:
        if how == "tensors":
            yield torch.randn(size, 128), torch.randint(0, 10, (size,))
            continue
        data = torch.utils.data.TensorDataset(torch.randn(size * 8, 128), torch.randint(0, 10, (size * 8,)))
        yield from torch.utils.data.DataLoader(data, batch_size=size, shuffle=True)


def step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def main() -> None:
    how, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    small, large = batches(how, SIZES[0]), batches(how, SIZES[1])
    for done in range(steps):
        x, y = next(small if done < warmup else large)
        step(model, opt, x, y)
    twin = copy.deepcopy(model)  # the run's own model and optimizer (kept alive: still the run's) step no more
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    for size in SIZES:
        x, y = torch.randn(size, 128), torch.randint(0, 10, (size,))
        with FlopCounterMode(display=False) as counter:
            step(twin, twin_opt, x, y)
        print(f"REF {size} {counter.get_total_flops()}", flush=True)


if __name__ == "__main__":
    main()
