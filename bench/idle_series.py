"""The idle gpumon TUI's CPU in tmux as a time series: whether an idle window's CPU is steady or comes in bursts.

Starts ``gpumon --simulate N --interval 1`` in a detached tmux pane (120x40), and from its first sampled frame reads
the process's CPU (user + system, all threads) every ``--slot`` seconds for ``--seconds``; prints the percent of one
core per slot (/proc counts in 10 ms ticks: 0.5% steps for a 2 s slot) and each thread's share of the window.

Usage: PYTHONPATH=. python bench/idle_series.py [--seconds 60] [--slot 2] [--gpus 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import psutil
from startup import Pane, gpumon_command, sampled_frame, tmux_server


def thread_seconds(proc: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--slot", type=float, default=2.0)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    command = [gpumon_command(), "--simulate", str(args.gpus), "--interval", "1"]
    with tmux_server() as server:
        pane = Pane(server, "series", 120, 40, command)
        try:
            pane.start()
            pane.wait_frame(sampled_frame)
            app = pane.app_process()
            started = time.perf_counter()
            first = last = thread_seconds(app)
            slots: list[float] = []
            while time.perf_counter() - started < args.seconds:
                time.sleep(args.slot)
                now = thread_seconds(app)
                slots.append(sum(now[k] - last.get(k, 0.0) for k in now) / args.slot * 100)
                last = now
            took = time.perf_counter() - started
        finally:
            pane.kill()
    print(f"% of one core per {args.slot:g} s slot from the first frame:")
    print(" ".join(f"{x:.1f}" for x in slots))
    rest = slots[1:] or slots
    print(f"mean after the first slot: {sum(rest) / len(rest):.2f}%   max: {max(rest):.1f}%")
    shares = sorted(((k, last[k] - first.get(k, 0.0)) for k in last), key=lambda kv: -kv[1])
    print("threads over the window (% of one core): " + ", ".join(f"{k} {v / took * 100:.2f}" for k, v in shares))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
