"""Multi-node start: wall time from ``gpumon launch ddp --hosts n0,n1`` to both nodes' first step, vs one host.

Both arms train the same world of 2 ranks (trainers.ddp on digits, gloo):
"one host" is ``gpumon launch ddp --nproc 2``; "two hosts" is ``gpumon launch ddp
--hosts n0,n1 --nproc 1`` through tests/ssh_standin.py (every host is this machine,
in a state dir of its own; the rendezvous on 127.0.0.1). Timed from just before the
launch command to the moment both ranks' first ``step`` event is on disk (polled
every 20 ms); the launch command's own return is reported too. Arms alternate,
``--repeats`` times; medians. Real ssh adds its connections: the preflight, node 0,
then the other nodes at once (about 0.5 s each on loopback, FIELD-NOTES).

Usage: python bench/multinode_start.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STANDIN = REPO / "tests" / "ssh_standin.py"
TRAIN = ["--", "--epochs", "100", "--max-steps", "5"]


def first_steps(root: Path) -> set[str]:
    """The ranks ('rank0', ...) that wrote a step event in any run under ``root``."""
    seen = set()
    for path in root.glob("**/runs/*/events/rank*.jsonl"):
        try:
            text = path.read_text()
        except OSError:
            continue
        if '"type":"step"' in text:
            seen.add(path.name.split(".")[0])
    return seen


def timed(argv: list[str], env: dict[str, str], root: Path) -> tuple[float, float]:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, cwd=root)
    returned = time.perf_counter() - started
    while first_steps(root) != {"rank0", "rank1"}:
        if time.perf_counter() - started > 300:
            raise SystemExit(f"no first step from both ranks in 300 s under {root}")
        time.sleep(0.02)
    return returned, time.perf_counter() - started


def wait_ended(env: dict[str, str]) -> None:
    """Until no run under this GPUMON_HOME (and no group) is live, so arms never overlap."""
    gpumon = [sys.executable, "-m", "gpumon", "runs"]
    for _ in range(600):
        out = subprocess.run(gpumon, env=env, capture_output=True, text=True).stdout
        if not any(state in out for state in (" running", " starting", " stopping")):
            return
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"one host": [], "two hosts": []}
    gpumon = [sys.executable, "-m", "gpumon", "launch", "ddp"]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.repeats):
            one = Path(tmp, f"one{i}")
            one.mkdir()
            env = {**os.environ, "GPUMON_HOME": str(one / "state"), "CUDA_VISIBLE_DEVICES": ""}
            results["one host"].append(timed([*gpumon, "--nproc", "2", *TRAIN], env, one))
            wait_ended(env)
            two = Path(tmp, f"two{i}")
            two.mkdir()
            env = {**env, "GPUMON_HOME": str(two / "launcher"), "STANDIN_ROOT": str(two / "hosts")}
            hosts = ["--hosts", "n0,n1", "--nproc", "1", "--ssh", f"{sys.executable} {STANDIN}"]
            results["two hosts"].append(timed([*gpumon, *hosts, "--rdzv-host", "127.0.0.1", *TRAIN], env, two))
            wait_ended(env)
            for node in ("n0", "n1"):
                wait_ended({**env, "GPUMON_HOME": str(two / "hosts" / node / "state")})
    print(f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    for arm, runs in results.items():
        back = statistics.median(r for r, _ in runs)
        first = statistics.median(f for _, f in runs)
        print(
            f"{arm:10} launch returns {back:5.2f} s  both ranks' first step {first:5.2f} s  (runs: "
            + ", ".join(f"{f:.2f}" for _, f in runs)
            + ")"
        )


if __name__ == "__main__":
    main()
