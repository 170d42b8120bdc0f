"""What counting steps by backward() costs a script that updates its weights by hand (issue 16 point 3).

A script with no torch.optim optimizer (``p.data.add_(p.grad, alpha=-lr)``) gets its steps from
gpumon's wrapper of ``torch.autograd.backward``. Measured in this process, per backward pass:
(a) ``loss.backward()`` of a small graph, plain; (b) the same through the wrapper, counting
(after 64 passes every backward is the step, recorded at most 200 times a second as in a run);
(c) a whole hand-written SGD step (forward, backward, update) plain and wrapped. Arms alternate.

Usage: python bench/step_fallback.py [--calls 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["GPUMON_RUN_DIR"] = tempfile.mkdtemp(prefix="gpumon-bench-")
    import torch

    from gpumon.telemetry import autohooks

    torch.set_num_threads(1)
    plain = torch.autograd.backward
    autohooks._count_backward(torch, autohooks.StepRecorder(torch))
    wrapped = torch.autograd.backward
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(4, 16)

    def backward_only(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            (x @ w).sum().backward()
        return (time.perf_counter() - started) / n * 1e6

    def sgd_step(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            loss = (x @ w).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                w.add_(w.grad, alpha=-1e-3)
                w.grad = None
        return (time.perf_counter() - started) / n * 1e6

    rows: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, fn in (("backward", plain), ("backward+gpumon", wrapped)):
            torch.autograd.backward = fn
            rows.setdefault(name, []).append(backward_only(args.calls))
        for name, fn in (("sgd step", plain), ("sgd step+gpumon", wrapped)):
            torch.autograd.backward = fn
            rows.setdefault(name, []).append(sgd_step(args.calls))
    print(f"# {platform.node()}, python {platform.python_version()}, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d')}, {args.calls} calls x {args.repeats}")  # fmt: skip
    for name, values in rows.items():
        print(f"{name:>18}: {statistics.median(values):7.2f} us per call (median of {len(values)})")
    med = {name: statistics.median(values) for name, values in rows.items()}
    extra, ratio = med["backward+gpumon"] - med["backward"], med["sgd step+gpumon"] / med["sgd step"]
    print(f"{'wrapper cost':>18}: {extra:7.2f} us per backward; {ratio:.3f}x a hand-written SGD step")


if __name__ == "__main__":
    main()
