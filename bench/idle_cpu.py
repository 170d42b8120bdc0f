"""CPU used by the idle gpumon TUI in a real terminal (tmux).

Starts ``gpumon --simulate 8 --interval 1`` in a detached tmux session (120x40 by
default), waits for the first sampled frame, lets it warm up 3 s, then reads the
gpumon process's CPU times (user + system, all its threads) at the start and the
end of a 60 s window and reports them as percent of one core. The tmux server's
CPU over the same window (the terminal's side of drawing) is printed for context.
Afterwards it presses "q" and checks the app quit cleanly.

The first frame here needs "SIMULATED", the host panel's "cores" and GPU 0's
"UTIL" line; the process PID is not required because at 80x24 with 8 GPUs the
process table has no room for a row.

Usage: python bench/idle_cpu.py [--seconds 60] [--gpus 8] [--interval 1] [--size 120x40 80x24]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import psutil
from startup import HarnessError, Pane, TmuxServer, gpumon_command, sampled_frame, tmux_server

GOAL_PERCENT = 2.0
WARMUP_S = 3.0


def size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes WIDTHxHEIGHT, e.g. 120x40, not {text!r}") from None
    if width < 20 or height < 10:
        raise argparse.ArgumentTypeError(f"too small: {text}")
    return width, height


def cpu_seconds(proc: psutil.Process) -> tuple[float, float]:
    times = proc.cpu_times()
    return times.user, times.system


def measure(
    server: TmuxServer, width: int, height: int, gpus: int, interval: float, seconds: float, warmup: float
) -> None:
    command = [gpumon_command(), "--simulate", str(gpus), "--interval", f"{interval:g}"]
    pane = Pane(server, f"idle-{width}x{height}", width, height, command)
    try:
        pane.start()
        pane.wait_frame(sampled_frame)
        time.sleep(warmup)
        app = pane.app_process()
        tmux = psutil.Process(server.server_pid())
        user0, sys0 = cpu_seconds(app)
        tmux0 = sum(cpu_seconds(tmux))
        started = time.perf_counter()
        time.sleep(seconds)
        user1, sys1 = cpu_seconds(app)
        tmux1 = sum(cpu_seconds(tmux))
        took = time.perf_counter() - started
        status = pane.quit()
    finally:
        pane.kill()
    user, system = user1 - user0, sys1 - sys0
    percent = (user + system) / took * 100
    label = f"gpumon --simulate {gpus} --interval {interval:g} in tmux {width}x{height}"
    print(f"idle CPU, {label}, {took:.1f} s window after {warmup:g} s warm-up")
    print(f"  gpumon (pid {app.pid}): {percent:.2f}% of one core (user {user:.2f} s, system {system:.2f} s)")
    print(f"  goal < {GOAL_PERCENT:g}%: {'met' if percent < GOAL_PERCENT else 'MISSED'}")
    print(f"  tmux server, for context: {(tmux1 - tmux0) / took * 100:.2f}% of one core")
    if status != 0:
        print("  WARNING: gpumon " + ("did not exit on q" if status is None else f"exited {status} on q"))
    else:
        print("  quit on q: exit 0")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window in seconds (default 60)")
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs (default 8)")
    parser.add_argument("--interval", type=float, default=1.0, help="gpumon's sampling interval (default 1)")
    parser.add_argument(
        "--size", type=size, nargs="+", default=[(120, 40)], help="terminal size(s), WIDTHxHEIGHT (default 120x40)"
    )
    parser.add_argument(
        "--warmup", type=float, default=WARMUP_S, help=f"seconds after the first frame (default {WARMUP_S:g})"
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    return each_size(
        "idle_cpu",
        args.size,
        lambda server, w, h: measure(server, w, h, args.gpus, args.interval, args.seconds, args.warmup),
    )


def each_size(bench: str, sizes: list[tuple[int, int]], measure_one: Callable[[TmuxServer, int, int], None]) -> int:
    """The load average, then ``measure_one`` at each terminal size on one tmux server; 1 if the harness failed."""
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    try:
        with tmux_server() as server:
            for width, height in sizes:
                measure_one(server, width, height)
    except (HarnessError, OSError, subprocess.SubprocessError, psutil.Error) as err:
        print(f"{bench} bench failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
