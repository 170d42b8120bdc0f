"""Plain CUDA loops for the GPU suite (tests/test_gpu_use.py); no gpumon code.

python gpu_use.py matmul SECONDS OUT.json   bf16 Linear 8192x8192, batch 8192: its own FLOP/s (one sync at the end)
python gpu_use.py fp32 STEPS [high]         an fp32 MLP; "high": set_float32_matmul_precision("high") (TF32)
python gpu_use.py item STEPS                a loop that reads loss.item() every step
python gpu_use.py strict STEPS              set_sync_debug_mode("error"): any sync in the loop raises
python gpu_use.py print STEPS               a loop that prints its loss every step (a sync inside torch's formatting)
python gpu_use.py copies STEPS [pin]        a DataLoader of 16 MB batches copied with non_blocking=True; "pin":
                                            pin_memory=True, else pageable (the copy blocks the host regardless)
python gpu_use.py feed STEPS                a CUDA loop fed by a slow DataLoader (10 ms a sample, num_workers=0)
python gpu_use.py busy|trickle SECONDS      a matmul loop, or one single-thread spin kernel after another
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

DIM = 8192


def mlp(dtype: torch.dtype = torch.float32) -> nn.Module:
    return nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 2048)).to("cuda", dtype)


def train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    batches: Iterable[Any],
    steps: int,
    loss_of: Callable[[Any], torch.Tensor],
    each: Callable[[torch.Tensor], None] | None = None,
    clip: bool = False,
) -> None:
    """The loop of every training mode: ``steps`` optimizer steps over ``batches`` (from its start again when it
    runs out), ``loss_of(batch)`` forward, ``each(loss)`` after every step."""
    done = 0
    while done < steps:
        for batch in batches:
            loss = loss_of(batch)
            opt.zero_grad()
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if each is not None:
                each(loss)
            done += 1
            if done >= steps:
                return


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=1e-3)


def fp32(steps: int, high: bool) -> None:
    if high:
        torch.set_float32_matmul_precision("high")
    model = mlp()
    x = torch.randn(1024, 2048, device="cuda")
    train(model, sgd(model), [x], steps, lambda x: model(x).square().mean())


def item(steps: int) -> None:
    model, total = mlp(), 0.0

    def add(loss: torch.Tensor) -> None:
        nonlocal total
        total += loss.item()

    x = torch.randn(256, 2048, device="cuda")
    train(model, sgd(model), [x], steps, lambda x: model(x).square().mean(), each=add)


def printed(steps: int) -> None:
    model = mlp()

    def show(loss: torch.Tensor) -> None:
        print(loss)

    x = torch.randn(256, 2048, device="cuda")
    train(model, sgd(model), [x], steps, lambda x: model(x).square().mean(), each=show)


def copies(steps: int, pin: bool) -> None:
    model = nn.Linear(4096, 16).cuda()
    data = torch.utils.data.TensorDataset(torch.randn(1024, 4096))  # a batch of 1024: 16 MB
    loader = torch.utils.data.DataLoader(data, batch_size=1024, pin_memory=pin)
    train(model, sgd(model), loader, steps, lambda batch: model(batch[0].to("cuda", non_blocking=True)).square().mean())


class Slow(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        time.sleep(0.01)
        return torch.randn(2048)


def feed(steps: int) -> None:
    model = mlp()
    loader = torch.utils.data.DataLoader(Slow(), batch_size=8, num_workers=0)
    train(model, sgd(model), loader, steps, lambda x: model(x.cuda()).square().mean())


def strict(steps: int) -> None:
    torch.cuda.set_sync_debug_mode("error")
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = [(torch.randn(256, 2048), torch.randn(256, 2048)) for _ in range(8)]
    loader = torch.utils.data.DataLoader(data, batch_size=None, pin_memory=True)

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch[0].to("cuda", non_blocking=True), batch[1].to("cuda", non_blocking=True)
        return nn.functional.mse_loss(model(x), y)

    train(model, opt, loader, steps, loss_of, clip=True)


def matmul(seconds: float, out: str) -> None:
    layer = nn.Linear(DIM, DIM, bias=False, device="cuda", dtype=torch.bfloat16)
    opt = torch.optim.SGD(layer.parameters(), lr=1e-6)
    x = torch.randn(DIM, DIM, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        layer(x).float().mean().backward()  # forward 2*D^3, the weight's gradient 2*D^3 (x needs none)
        opt.step()
        opt.zero_grad()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    from torch.utils import benchmark

    timed = benchmark.Timer(stmt="step()", globals={"step": step}).blocked_autorange(min_run_time=2.0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            step()
        steps += 20
    torch.cuda.synchronize()
    own = steps * 4 * DIM**3 / (time.perf_counter() - start)
    result = {"own_flops_per_s": own, "benchmark_flops_per_s": 4 * DIM**3 / timed.median, "analytic": 4 * DIM**3}
    with open(out, "w") as f:
        json.dump(result, f)


def busy(seconds: float, trickle: bool) -> None:
    a = torch.randn(8192, 8192, device="cuda")
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(10):
            if trickle:
                torch.cuda._sleep(50_000_000)  # one thread spinning: the GPU "busy", one SM of them used
            else:
                a @ a
        torch.cuda.synchronize()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "matmul":
        matmul(float(sys.argv[2]), sys.argv[3])
    elif mode == "fp32":
        fp32(int(sys.argv[2]), len(sys.argv) > 3)
    elif mode == "item":
        item(int(sys.argv[2]))
    elif mode == "strict":
        strict(int(sys.argv[2]))
    elif mode == "print":
        printed(int(sys.argv[2]))
    elif mode == "copies":
        copies(int(sys.argv[2]), len(sys.argv) > 3)
    elif mode == "feed":
        feed(int(sys.argv[2]))
    else:
        busy(float(sys.argv[2]), mode == "trickle")
