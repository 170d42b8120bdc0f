"""What the straggler's clocks cost a step (telemetry/collectives.py): the wrapper around torch.distributed's
blocking collectives (two perf_counter reads, its group's name, its caller's file:line, the tensor's bytes) and
the backward() timing, against a 10 ms step (the issue's bound: at most 1%).

One process. The wrapper alone: ``collectives._timed`` around a function with ``all_reduce``'s signature that
does nothing, called with a 64-float tensor, against the bare function (what it adds whatever the collective).
Then the real thing, a one-rank gloo group (the collective itself is cheap, so its time does not hide the
wrapper's): ``dist.all_reduce`` as torch has it and as the hook wraps it, alternated run by run, then
``dist.all_reduce(t, async_op=True).wait()`` the same way (the async path: the work's completion callback and its
timed wait). Each figure is the fastest of ``--repeats`` runs
of ``--calls`` calls (the least disturbed by other processes on a shared machine). The backward timing is the two
perf_counter reads and an addition that autohooks.py adds around ``torch.autograd.backward``; the CPU time is
the step event's ``cpu`` (one ``process_time`` read). A step's cost: one backward, one CPU read and ``--per-step``
collectives (a DDP loop that all-reduces its loss and a stop flag: 2).

Usage: python bench/collective_clock.py [--calls 20000] [--repeats 5] [--per-step 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gpumon.telemetry import collectives

STEP_S = 0.010


def per_call(fns: tuple[Callable[..., Any], ...], calls: int, repeats: int, tensor: torch.Tensor) -> list[float]:
    """Seconds a call of each of ``fns`` takes, the fastest of ``repeats`` runs, the functions alternated."""
    runs: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(calls):
                fn(tensor)
            runs[i].append((time.perf_counter() - start) / calls)
    return [min(times) for times in runs]


def backward_timing(calls: int) -> float:
    """Seconds the backward wrapper's own timing adds a call (autohooks.py's two reads and an addition)."""
    clock = collectives.Clock()
    start = time.perf_counter()
    for _ in range(calls):
        began = time.perf_counter()
        clock.backward_s += time.perf_counter() - began
    return (time.perf_counter() - start) / calls


def cpu_timing(calls: int) -> float:
    """Seconds the step event's CPU time costs (Clock.take_cpu: one process_time read), once per step event."""
    clock = collectives.Clock()
    start = time.perf_counter()
    for _ in range(calls):
        clock.take_cpu()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--per-step", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tensor = torch.ones(64)

    def nothing(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        return None  # all_reduce's parameters: the wrapper reads its group and async_op by them

    clock = collectives.Clock()
    bare, wrapped = per_call((nothing, collectives._timed(dist, "all_reduce", nothing, clock)), args.calls,
                             args.repeats, tensor)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{Path(tmp) / 'store'}", rank=0, world_size=1)
        original = dist.all_reduce
        collectives.hook(torch, clock)
        per_call((original, dist.all_reduce), 1000, 1, tensor)  # warm
        without, with_hook = per_call((original, dist.all_reduce), args.calls, args.repeats, tensor)

        def waited(fn: Callable[..., Any]) -> Callable[[torch.Tensor], Any]:
            return lambda t: fn(t, async_op=True).wait()

        async_without, async_with = per_call((waited(original), waited(dist.all_reduce)), args.calls, args.repeats,
                                             tensor)  # fmt: skip
        dist.destroy_process_group()
    wrapper = max(0.0, wrapped - bare)
    backward = backward_timing(args.calls)
    cpu = cpu_timing(args.calls)
    step = wrapper * args.per_step + backward + cpu
    print(
        json.dumps(
            {
                "wrapper_us": round(wrapper * 1e6, 2),
                "all_reduce_us": round(without * 1e6, 2),
                "all_reduce_hooked_us": round(with_hook * 1e6, 2),
                "async_all_reduce_wait_us": round(async_without * 1e6, 2),
                "async_all_reduce_wait_hooked_us": round(async_with * 1e6, 2),
                "backward_timing_us": round(backward * 1e6, 3),
                "cpu_time_us": round(cpu * 1e6, 3),
                "per_step_us": round(step * 1e6, 2),
                "share_of_10ms_step": f"{step / STEP_S:.3%}",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
