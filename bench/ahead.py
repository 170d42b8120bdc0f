"""What the work done ahead of the keys costs the main thread, piece by piece, counted headless.

A key typed while that work goes on waits for the piece under way (gpumon/tui/ahead.py): each piece's CPU is the
most a first key waits for it. Textual's test runner (``--size``, ``--simulate 2`` as a real sampler thread, ``--runs``
recorded runs in a state dir of its own) starts ``--repeat`` times; each start is left until the app has laid out
and drawn all it does ahead. Prints, per piece, the median and max main-thread CPU (time.thread_time, ms: a loaded
machine changes it little) over the starts, in the order the pieces ran, then the messages that took more than
``--over`` ms of main-thread CPU in that time (a handler that awaits counts what ran meanwhile too).

Usage: PYTHONPATH=. python bench/ahead.py [--runs 20] [--repeat 3] [--size 100x30] [--over 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from keys import write_runs
from keys_counted import until


async def one_start(args: argparse.Namespace) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    from textual.message_pump import MessagePump

    from gpumon.core.gpu.simulated import SimulatedSource
    from gpumon.core.host import HostSource
    from gpumon.core.sampler import Sampler
    from gpumon.tui.app import GpumonApp

    slow: list[tuple[str, float]] = []
    real = MessagePump._dispatch_message

    async def timed(self: MessagePump, message: Any) -> None:
        began = time.thread_time()
        try:
            await real(self, message)
        finally:
            spent = time.thread_time() - began
            if spent * 1000 > args.over:
                slow.append((f"{type(self).__name__} {type(message).__name__}", spent))

    width, height = (int(n) for n in args.size.split("x"))
    sampler = Sampler(SimulatedSource(2, seed=1), HostSource(), interval=1.0)
    sampler.start()
    app = GpumonApp(sampler)
    MessagePump._dispatch_message = timed  # type: ignore[method-assign]
    try:
        async with app.run_test(size=(width, height)) as pilot:
            await until(pilot, lambda: not app.drawing_unseen(), timeout=60)
            await pilot.pause(0.3)
    finally:
        MessagePump._dispatch_message = real  # type: ignore[method-assign]
        sampler.stop()
    return list(app.ahead.pieces.costs), slow


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", default="100x30")
    parser.add_argument("--over", type=float, default=20.0)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="gpumon-ahead-"))
    os.environ["GPUMON_HOME"] = str(home)
    try:
        write_runs(home, args.runs)
        pieces: dict[str, list[float]] = {}
        slow: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            costs, slowest = asyncio.run(one_start(args))
            for i, (name, spent) in enumerate(costs):
                pieces.setdefault(f"{i:2d} {name}", []).append(spent * 1000)
            for name, spent in slowest:
                slow.setdefault(name, []).append(spent * 1000)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.1f}; {args.repeat} starts, {args.size}, {args.runs} runs")
    print(f"{'piece of the work ahead':60s} {'median':>7s} {'max':>7s} ms CPU")
    for name, spent in pieces.items():
        print(f"{name:60s} {statistics.median(spent):7.1f} {max(spent):7.1f}")
    total = sum(statistics.median(spent) for spent in pieces.values())
    print(f"{'all pieces':60s} {total:7.1f}")
    print(f"\nmessages over {args.over:.0f} ms CPU (count over all starts, median, max)")
    for name, spent in sorted(slow.items(), key=lambda item: -max(item[1])):
        print(f"{name:54s} {len(spent):4d} {statistics.median(spent):7.1f} {max(spent):7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
