"""Idle CPU of the gpumon TUI and of htop measured at once, side by side, in windows (issue 35's goal: at most 2x).

Both run in panes of one tmux server (100x30): ``gpumon --simulate 2 --interval 1`` on a state dir of its own holding
``--runs`` finished runs (bench/keys.py's, default 20), and htop at its default (a frame each 1.5 s; ``--htop-delay
10`` for a frame a second, as gpumon here). After a warm-up each of ``--windows`` windows of ``--seconds`` reads both
processes' CPU (every thread, /proc/<pid>/task/*/schedstat, to the nanosecond) at its start and end, and prints each
window's ms a second and ratio, then the median ratio.

Measured at the same time, the two see the same machine: measured one after the other, the ratio of one pair of
windows moved by 30% here with nothing else running (the load, the clock and the cache of a 2-core VM). ``--split``
shows gpumon's main thread apart from its others (the sampler, the feeds' readers, Textual's writer).

Usage: PYTHONPATH=. python bench/idle_beside_htop.py [--runs 20] [--windows 5] [--seconds 45] [--warm 10]
                                                       [--htop-delay 15] [--split]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from idle_threads import thread_ns
from keys import load, write_runs
from startup import HarnessError, Pane, gpumon_command, sampled_frame, tmux_server

GOAL_X = 2.0


def has_htop(screen: str) -> bool:
    return "PID" in screen and "Command" in screen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="finished runs in the state dir (default 20)")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--warm", type=float, default=10.0)
    parser.add_argument("--htop-delay", type=int, default=15, help="htop's -d, tenths of a second (default 15)")
    parser.add_argument("--split", action="store_true", help="gpumon's main thread apart from the others")
    args = parser.parse_args()
    if not shutil.which("htop"):
        print("htop is not on the PATH: install it (apt-get install htop) for the reference", file=sys.stderr)
        return 2
    print(f"load average at start: {load()}")
    home = tempfile.mkdtemp(prefix="gpumon-idle-")
    write_runs(Path(home), args.runs)
    ratios: list[float] = []
    try:
        with tmux_server() as server:
            command = ["env", f"GPUMON_HOME={home}", gpumon_command(), "--simulate", "2", "--interval", "1"]
            gpumon = Pane(server, "idle-gpumon", 100, 30, command)
            htop = Pane(server, "idle-htop", 100, 30, ["htop", "-d", str(args.htop_delay)])
            try:
                gpumon.start()
                htop.start()
                gpumon.wait_frame(sampled_frame)
                htop.wait_frame(has_htop)
                g, h = gpumon.app_process().pid, htop.app_process("htop").pid
                time.sleep(args.warm)
                for window in range(1, args.windows + 1):
                    g0, h0, started = thread_ns(g), thread_ns(h), time.monotonic()
                    time.sleep(args.seconds)
                    g1, h1, took = thread_ns(g), thread_ns(h), time.monotonic() - started
                    per = {k: (g1[k] - g0.get(k, 0)) / 1e6 / took for k in g1}
                    gms, hms = sum(per.values()), sum(h1[k] - h0.get(k, 0) for k in h1) / 1e6 / took
                    ratios.append(gms / hms)
                    split = f" (main {per.get(g, 0.0):.2f}, others {gms - per.get(g, 0.0):.2f})" if args.split else ""
                    print(f"  window {window}: gpumon {gms:.2f}{split}  htop {hms:.2f} ms/s  ratio {gms / hms:.2f}x")
            finally:
                gpumon.kill()
                htop.kill()
    except HarnessError as err:
        print(f"idle bench failed: {err}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
    median = statistics.median(ratios)
    verdict = "met" if median <= GOAL_X else "MISSED"
    print(f"median gpumon / htop -d {args.htop_delay}: {median:.2f}x (goal at most {GOAL_X:.0f}x: {verdict})")
    print(f"load average at end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
