"""What one sample of the AMD and Intel readers costs, on the recorded trees (tests/data/sys/).

    python bench/vendor_read.py [--samples N]

Each sample reads every card's sysfs files and every process's fdinfo under GPUMON_SYS_ROOT, as
at each tick of the monitor. Prints the median and the 90th percentile in milliseconds per tree.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from gpumon.core.gpu.amd import AmdSource
from gpumon.core.gpu.intel import IntelSource
from gpumon.core.sysroot import SysFiles

TREES = Path(__file__).resolve().parent.parent / "tests" / "data" / "sys"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    for tree in ("mi300x", "radeon", "intel"):
        files = SysFiles(TREES / tree)
        source = AmdSource(files) if tree != "intel" else IntelSource(files)
        times = []
        for _ in range(args.samples):
            t = time.perf_counter()
            sample = source.sample()
            times.append((time.perf_counter() - t) * 1000)
        p90 = statistics.quantiles(times, n=10)[-1]
        gpus, files_read = len(sample.devices), len(files.used)
        print(f"{tree:8} {gpus} GPUs, {files_read} files: median {statistics.median(times):.2f} ms, p90 {p90:.2f} ms")


if __name__ == "__main__":
    main()
