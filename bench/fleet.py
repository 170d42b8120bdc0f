"""The fleet's cost: 16 hosts x 8 simulated GPUs, each a real process tree through the ssh stand-in.

Starts a FleetMonitor in this process over ``--hosts`` hosts reached through tests/fleet_ssh.py (each
host: the stand-in, ``sh -c`` and ``gpumon snapshot --json --watch --fields fleet``), then reports
  - time from start() to the first full fleet state (every host live with a snapshot);
  - over ``--seconds`` (default 30): this process's CPU (the FleetMonitor's threads only: the main
    thread sleeps) and, separately, the CPU of every process of the hosts, as percent of one core;
    once without the hosts' runs and once with them (each host's stream then carries its runs, ``--runs 20``);
  - freeze-to-stale: a host's process group gets SIGSTOP at a random moment; the time until its
    link reads ``stale`` (goal: within 2 intervals), ``--freezes`` times (default 5).

Usage: python bench/fleet.py [--hosts 16] [--gpus 8] [--interval 1] [--seconds 30] [--freezes 5]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpumon.core.fleet.hosts import parse_hosts  # noqa: E402
from gpumon.core.fleet.link import RUNS_EVERY_S  # noqa: E402
from gpumon.core.fleet.monitor import FleetMonitor  # noqa: E402


def all_live(state: object) -> bool:
    return all(h.link == "live" and h.snapshot is not None for h in state.hosts)  # type: ignore[attr-defined]


def tree_cpu(me: psutil.Process) -> dict[int, float]:
    out = {}
    for proc in me.children(recursive=True):
        try:
            times = proc.cpu_times()
            out[proc.pid] = times.user + times.system
        except psutil.Error:
            continue
    return out


def window(monitor: FleetMonitor, seconds: float) -> tuple[float, float]:
    """(this process's CPU %, the hosts' processes' CPU %) of one core over ``seconds``."""
    me = psutil.Process()
    own0, tree0, reaped0 = me.cpu_times(), tree_cpu(me), os.times()
    start = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - start
    own1, tree1, reaped1 = me.cpu_times(), tree_cpu(me), os.times()
    own = (own1.user + own1.system) - (own0.user + own0.system)
    live = sum(cpu - tree0.get(pid, 0.0) for pid, cpu in tree1.items())
    ended = (reaped1.children_user + reaped1.children_system) - (reaped0.children_user + reaped0.children_system)
    return 100 * own / took, 100 * (live + ended) / took


def run(args: argparse.Namespace, runs_every: float, root: Path) -> FleetMonitor:
    stand_in = [sys.executable, str(ROOT / "tests" / "fleet_ssh.py"), "--root", str(root), "--gpus", str(args.gpus)]
    hosts = parse_hosts([f"gpu{i:02d}" for i in range(args.hosts)])
    monitor = FleetMonitor(hosts, stand_in, args.interval, runs_every=runs_every)
    started = time.monotonic()
    monitor.start()
    state = monitor.wait(all_live, timeout=120)
    took = time.monotonic() - started
    live = sum(h.link == "live" for h in state.hosts)
    print(f"first full fleet state: {took:.2f} s ({live}/{args.hosts} hosts live, {state.totals()[1]} GPUs)")
    time.sleep(3)  # past the start-up of every host's stream
    own, hosts_cpu = window(monitor, args.seconds)
    what = "without the hosts' runs" if not runs_every else "with the hosts' runs in their streams"
    print(f"{what}: FleetMonitor (this process) {own:.2f}% of one core; hosts' processes {hosts_cpu:.1f}%")
    return monitor


def freezes(monitor: FleetMonitor, count: int, interval: float) -> None:
    took = []
    names = list(monitor.links)
    for _ in range(count):
        name = random.choice(names)
        pid = monitor.links[name].pid  # type: ignore[attr-defined]
        time.sleep(random.uniform(0, interval))
        frozen = time.monotonic()
        os.killpg(pid, signal.SIGSTOP)
        try:
            monitor.wait(lambda s, n=name: next(h for h in s.hosts if h.host.name == n).link == "stale", timeout=30)
            took.append(time.monotonic() - frozen)
        finally:
            os.killpg(pid, signal.SIGCONT)
        monitor.wait(all_live, timeout=60)
    worst = max(took) / interval
    print(
        f"freeze to stale: {', '.join(f'{t:.2f}' for t in took)} s; worst {worst:.2f} intervals "
        f"(goal <= 2: {'met' if worst <= 2.05 else 'MISSED'})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--freezes", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(
        f"{args.hosts} hosts x {args.gpus} simulated GPUs, interval {args.interval:g} s, windows of {args.seconds:g} s"
    )
    with tempfile.TemporaryDirectory(prefix="gpumon-fleet-bench-") as tmp:
        monitor = run(args, 0.0, Path(tmp))
        try:
            freezes(monitor, args.freezes, args.interval)
        finally:
            monitor.stop()
        monitor = run(args, RUNS_EVERY_S, Path(tmp))
        monitor.stop()
        left = psutil.Process().children(recursive=True)
        print(f"processes left after stop(): {len([p for p in left if p.status() != psutil.STATUS_ZOMBIE])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
