"""The cost of draining a run's output through the supervisor's pipe (gpumon/core/runs/supervision/output.py).

A child process writes to its stdout as fast as it can; we time it three ways: stdout a file (what runs
had before: no drain), a pipe drained by ``Drain`` with a cap above the flood (every byte written), and the
same with the default 64 MiB cap (the head and tail kept). Then a chatty but ordinary script (100-byte
lines, 20,000 a second for 10 s) through the drain: the drain's CPU, as the supervisor pays it.

    python bench/output_drain.py [--mb 1024]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpumon.core.runs.supervision.output import DEFAULT_CAP, Drain

FLOOD = """
import os, sys
block = b"x" * 1023 + b"\\n"
block *= 256
for _ in range(int(sys.argv[1]) * 4):
    os.write(1, block)
"""

CHATTY = """
import sys, time
start = time.monotonic()
n = 0
while time.monotonic() - start < 10:
    for _ in range(200):
        print(f"step {n:09d} loss 0.123456 lr 0.000100 samples/s 1234.5 " + "." * 40)
        n += 1
    time.sleep(0.01)
"""


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def direct(folder: Path, mb: int) -> tuple[float, float, int]:
    path = folder / "direct.log"
    start, c0 = time.monotonic(), cpu()
    with open(path, "wb") as out:
        subprocess.run([sys.executable, "-c", FLOOD, str(mb)], stdout=out, check=True)
    return time.monotonic() - start, cpu() - c0, path.stat().st_size


def drained(folder: Path, script: str, args: list[str], cap: int, name: str) -> tuple[float, float, int]:
    logs = folder / name
    logs.mkdir()
    start, c0 = time.monotonic(), cpu()
    drain = Drain(logs, cap)
    write, held = drain.pipe("rank0.log")
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=write, pass_fds=(held,))
    os.close(write)
    os.close(held)
    proc.wait()
    drain.close()
    return time.monotonic() - start, cpu() - c0, (logs / "rank0.log").stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"{args.mb} MiB flood | wall s | MiB/s | drain CPU s (this process) | log MiB")
        cases = [
            ("file (no drain)", direct(folder, args.mb)),
            ("pipe, cap above the flood", drained(folder, FLOOD, [str(args.mb)], 1 << 40, "big")),
            (f"pipe, cap {DEFAULT_CAP >> 20} MiB", drained(folder, FLOOD, [str(args.mb)], DEFAULT_CAP, "cap")),
        ]
        for label, (wall, used, size) in cases:
            print(f"{label} | {wall:.2f} | {args.mb / wall:.0f} | {used:.2f} | {size / 2**20:.1f}")
        wall, used, size = drained(folder, CHATTY, [], DEFAULT_CAP, "chatty")
        share = 100 * used / wall
        print(f"chatty script, 10 s of ~20,000 lines/s: {size / 2**20:.1f} MiB, drain CPU {used:.2f} s ({share:.1f}%)")


if __name__ == "__main__":
    main()
