"""Peak memory of ``gpumon logs RUN --follow`` while the run floods its log (goal: < 50 MB).

A real run (``gpumon launch script``) waits until the follower is attached, then writes ``--mb`` MB to
stdout as fast as it can (``--kind lines``: 68-byte lines; ``bar``: tqdm-style frames joined by ``\\r``, no
newline until the end) and exits. The follower's output goes to a file (a pipe's behaviour: finished
lines, a bar's latest frame a few times a second). Its RSS is sampled with psutil every 10 ms.

    python bench/logs_follow.py [--mb 200] [--kind lines bar]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

FLOOD = """
import os, sys, time
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
total = int(sys.argv[2]) * 1024 * 1024
if sys.argv[3] == "lines":
    block = b"".join(b"%08d a log line of a flood, as a chatty training script writes it\\n" % i for i in range(4000))
else:
    block = b"".join(b"\\r%7d/9999999 [01:02<03:04, 1234.56it/s] loss=0.123" % i for i in range(4000))
for _ in range(total // len(block) + 1):
    sys.stdout.buffer.write(block)
sys.stdout.buffer.write(b"\\ndone\\n")
"""


def one(mb: int, kind: str, home: Path) -> dict[str, Any]:
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    script, gate, out = home / "flood.py", home / f"gate-{kind}", home / f"followed-{kind}.txt"
    script.write_text(FLOOD)
    gpumon = [sys.executable, "-m", "gpumon"]
    launched = subprocess.run([*gpumon, "launch", "script", str(script), "--", str(gate), str(mb), kind],
                              env=env, capture_output=True, text=True, check=True)  # fmt: skip
    run_id = launched.stdout.strip().splitlines()[-1].split()[-1]
    with out.open("wb") as sink:
        follower = subprocess.Popen([*gpumon, "logs", run_id, "--follow", "-n", "1"], env=env, stdout=sink)
        proc = psutil.Process(follower.pid)
        while not out.read_bytes().startswith(b"ready\n"):
            time.sleep(0.01)
        gate.write_text("go")
        start, peak = time.monotonic(), 0
        while follower.poll() is None:
            try:
                peak = max(peak, proc.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            time.sleep(0.01)
        wall = time.monotonic() - start
    log = home / "runs" / run_id / "logs" / "rank0.log"
    tail = out.read_bytes()[-400:].decode(errors="replace").splitlines()[-3:]
    return {
        "tail": " | ".join(tail),
        "log_mb": log.stat().st_size / 2**20,
        "out_kb": out.stat().st_size / 2**10,
        "peak_mb": peak / 2**20,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--kind", nargs="+", default=["lines", "bar"], choices=["lines", "bar"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kind:
            r = one(args.mb, kind, Path(tmp))
            print(
                f"{kind:5}  log {r['log_mb']:.0f} MB  followed: {r['out_kb']:,.0f} KB written  "
                f"peak RSS {r['peak_mb']:.1f} MB  {r['wall_s']:.1f} s  (goal < 50 MB)"
            )
            print(f"       its end: {r['tail']}")


if __name__ == "__main__":
    main()
