"""Each thread's CPU of the idle gpumon TUI in tmux, to the nanosecond (/proc/<pid>/task/*/schedstat).

Starts ``gpumon --simulate 2 --interval 1`` in a detached tmux pane (100x30), waits ``--warm`` seconds after its first
sampled frame, then prints each thread's CPU over ``--seconds`` in ms a second (psutil's counts come in 10 ms ticks,
too coarse for a thread using 0.1 ms a second). Run it back to back before and after a change: the machine's load
and clock move the numbers by 5-10%, and at rest by more.

Usage: PYTHONPATH=. python bench/idle_threads.py [--seconds 30] [--warm 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from startup import Pane, gpumon_command, sampled_frame, tmux_server


def thread_ns(pid: int) -> dict[int, int]:
    out: dict[int, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except OSError:  # the thread ended
            pass
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warm", type=float, default=8.0)
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tmux_server() as server:
        pane = Pane(server, "threads", 100, 30, [gpumon_command(), "--simulate", "2", "--interval", "1"])
        try:
            pane.start()
            pane.wait_frame(sampled_frame)
            app = pane.app_process()
            time.sleep(args.warm)
            first, started = thread_ns(app.pid), time.monotonic()
            time.sleep(args.seconds)
            last, took = thread_ns(app.pid), time.monotonic() - started
        finally:
            pane.kill()
    per = sorted(((k, (last[k] - first.get(k, 0)) / 1e6 / took) for k in last), key=lambda kv: -kv[1])
    total = sum(v for _, v in per)
    names = ", ".join(f"{'main' if k == app.pid else k} {v:.2f}" for k, v in per if v >= 0.005)
    print(f"ms of CPU a second: total {total:.2f} ({total / 10:.3f}% of a core); by thread: {names}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
