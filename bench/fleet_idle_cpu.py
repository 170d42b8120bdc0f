"""CPU used by the idle Fleet view in a real terminal (tmux): 16 hosts x 8 simulated GPUs by default.

Starts ``python -m tests.fleet_data --hosts 16 --gpus 8``: gpumon with a stand-in fleet whose ``state()``
hands out precomputed FleetStates of real simulated snapshot documents, a new one each second (every
GPU line changes every second, as on a busy fleet). So the window measures the view: reading the
state, diffing hosts, repainting lines; not ssh or JSON parsing (the fleet core's cost, measured apart).
Same method as idle_cpu.py: the app's CPU times (user + system, all threads) over a window that starts
3 s after the first frame, as percent of one core.

With ``--real``: ``gpumon --hosts gpu01,...,gpu16 --ssh 'python tests/fleet_ssh.py ...'``, the whole path (a
FleetMonitor reading every host's stream through the ssh stand-in); the app's CPU then includes parsing
every host's lines, and the first frame is the first with every host live.

Usage: python bench/fleet_idle_cpu.py [--seconds 60] [--hosts 16] [--gpus 8] [--size 200x60 80x24] [--real]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from idle_cpu import WARMUP_S, cpu_seconds, each_size, size
from startup import Pane, TmuxServer

GOAL_PERCENT = 3.0
ROOT = Path(__file__).resolve().parent.parent


def measure(server: TmuxServer, width: int, height: int, hosts: int, gpus: int, seconds: float, real: bool) -> None:
    if real:  # the whole path: gpumon --hosts, a FleetMonitor, one ssh stand-in process tree per host
        root = tempfile.mkdtemp(prefix="gpumon-fleet-bench-")
        names = ",".join(f"gpu{i + 1:02d}" for i in range(hosts))
        ssh = f"{sys.executable} {ROOT / 'tests' / 'fleet_ssh.py'} --root {root} --gpus {gpus}"
        command = [sys.executable, "-m", "gpumon", "--simulate", "1", "--hosts", names, "--ssh", ssh]
        needle = "--hosts"  # the app alone: the hosts' processes name gpumon too
    else:
        command = [sys.executable, "-m", "tests.fleet_data", "--hosts", str(hosts), "--gpus", str(gpus)]
        needle = "tests.fleet_data"
    pane = Pane(server, f"fleet-{width}x{height}", width, height, command)
    total = f"of {hosts * gpus} GPUs idle" if not real else f"{hosts} hosts ({hosts} live)"
    try:
        started = time.perf_counter()
        pane.start()
        seen = pane.wait_frame(lambda screen: total in screen and "gpu01" in screen)
        time.sleep(WARMUP_S)
        app = pane.app_process(needle)
        user0, sys0 = cpu_seconds(app)
        window = time.perf_counter()
        time.sleep(seconds)
        user1, sys1 = cpu_seconds(app)
        took = time.perf_counter() - window
        status = pane.quit()
    finally:
        pane.kill()
    percent = (user1 - user0 + sys1 - sys0) / took * 100
    how = "through the ssh stand-in (app and FleetMonitor; not the hosts)" if real else "stand-in states"
    print(f"Fleet view, {hosts} hosts x {gpus} simulated GPUs, every 1 s, tmux {width}x{height}, {how}")
    what = "every host live" if real else "includes precomputing the stand-in's states"
    print(f"  first full fleet frame {seen - started:.2f} s after start ({what})")
    user, system = user1 - user0, sys1 - sys0
    print(f"  idle CPU over {took:.1f} s: {percent:.2f}% of one core (user {user:.2f} s, sys {system:.2f} s)")
    print(f"  goal < {GOAL_PERCENT:g}%: {'met' if percent < GOAL_PERCENT else 'MISSED'}")
    print("  quit on q: " + ("exit 0" if status == 0 else f"WARNING: {status}"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--size", type=size, nargs="+", default=[(200, 60), (80, 24)])
    parser.add_argument("--real", action="store_true", help="gpumon --hosts over the ssh stand-in (the whole path)")
    args = parser.parse_args(argv)
    os.environ["PYTHONPATH"] = str(ROOT)  # the tmux server (and so the pane) inherits it: tests.fleet_data imports

    def one(server: TmuxServer, width: int, height: int) -> None:
        measure(server, width, height, args.hosts, args.gpus, args.seconds, args.real)

    return each_size("fleet_idle_cpu", args.size, one)


if __name__ == "__main__":
    sys.exit(main())
