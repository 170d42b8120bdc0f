"""A run never summarised (issue 25): 2,000,000 steps of raw events with no summary.json (an older gpumon's
run, or one copied from another machine). Wall time and peak RSS of the first ``gpumon runs --json`` (folds
it chunk by chunk and writes its summary) and of the second (reads the summary and the index).

Usage: python bench/unsummarised.py [--steps 2000000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults.unsummarised import write_unsummarised


def measure(home: Path) -> tuple[float, float]:
    env = {**os.environ, "GPUMON_HOME": str(home)}
    start = time.monotonic()
    proc = psutil.Popen([sys.executable, "-m", "gpumon", "runs", "--json"], env=env, stdout=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, proc.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.02)
    return time.monotonic() - start, peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        t0 = time.monotonic()
        run_dir = write_unsummarised(home / "runs", "script-1124-101010-ab12", args.steps)
        size = (run_dir / "events" / "rank0.4242.jsonl.gz").stat().st_size
        print(f"wrote {args.steps:,} steps ({size / 2**20:.0f} MiB gzipped) in {time.monotonic() - t0:.0f} s")
        for label in ("first gpumon runs --json (folds, summarises)", "second (summary and index)"):
            wall, peak = measure(home)
            print(f"{label}: {wall:.1f} s, peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
