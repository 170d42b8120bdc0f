"""What one idle second of the gpumon TUI costs its main thread, counted headless.

Textual's test runner (100x30 by default, ``--simulate 2`` (``--gpus``) as a real sampler thread ticking each second,
``--runs`` recorded runs in a state dir of its own): once the app is at rest (its reads done, what it builds
ahead built, ``--keys`` going round the views first as bench/keys.py does), counts over ``--ticks`` samples:

    ms        the main thread's CPU per second (time.thread_time)
    frames    compositor updates handed to the display     bytes   what they would write to the terminal
    widgets   widgets whose lines the compositor asked for  lines   lines a widget drew anew (StylesCache)
    messages  messages dispatched, by type                  timers  timer callbacks and events, by name

and prints them per second, with the widgets and lines by class (``--profile N``: cProfile's top N too).

Usage: PYTHONPATH=. python bench/idle_counted.py [--ticks 20] [--runs 20] [--gpus 2] [--keys] [--size 100x30]
                                                    [--profile 40]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from keys import write_runs
from keys_counted import steps, until


@contextmanager
def hooks(count: Counter[str]) -> Iterator[None]:
    from textual._styles_cache import StylesCache
    from textual.app import App
    from textual.message_pump import MessagePump
    from textual.timer import Timer
    from textual.widget import Widget

    real: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, before: Callable[..., None], timed: Callable[..., str] | None = None) -> None:
        original = getattr(owner, name)
        real.append((owner, name, original))

        def hooked(*args: Any, **kwargs: Any) -> Any:
            before(*args, **kwargs)
            if timed is None:
                return original(*args, **kwargs)
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                count[f"ms:{timed(*args)}"] += (time.thread_time() - started) * 1000

        setattr(owner, name, hooked)

    current: list[str] = [""]

    def lines(widget: Any, crop: Any) -> None:
        current[0] = type(widget).__name__
        count["widgets"] += 1
        count[f"w:{current[0]}"] += 1

    def line(*args: Any, **kwargs: Any) -> None:
        count["lines"] += 1
        count[f"l:{current[0]}"] += 1

    def display(app: Any, screen: Any, renderable: Any) -> None:
        if renderable is None or app._batch_count:
            return
        count["frames"] += 1
        started = time.thread_time()
        text = renderable.render_segments(app.console)  # headless: what the terminal would be sent
        count["bytes"] += len(text.encode())
        count["ms_write_build"] += (time.thread_time() - started) * 1000  # not the app's: taken off ms

    def message(pump: Any, msg: Any) -> None:
        count["messages"] += 1
        count[f"m:{type(msg).__name__}>{type(pump).__name__}"] += 1

    def tick(timer: Any, **kwargs: Any) -> None:
        what = timer._callback if timer._callback is not None else timer.name
        count[f"t:{getattr(what, '__qualname__', what)}"] += 1

    wrap(Widget, "render_lines", lines, lambda widget, crop: f"render_lines {type(widget).__name__}")
    wrap(StylesCache, "render_line", line)
    wrap(App, "_display", display)
    wrap(MessagePump, "_dispatch_message", message)
    wrap(Timer, "_tick", tick)
    from textual._compositor import Compositor
    from textual.screen import Screen

    from gpumon.tui.app import GpumonApp

    nothing = lambda *a, **k: None  # noqa: E731
    wrap(Compositor, "render_update", nothing, lambda *a, **k: "compositor render_update")
    wrap(Screen, "_compositor_refresh", nothing, lambda *a, **k: "screen _compositor_refresh (with the display)")
    wrap(GpumonApp, "on_sample_ready", nothing, lambda *a, **k: "app on_sample_ready")
    try:
        yield
    finally:
        for owner, name, original in reversed(real):
            setattr(owner, name, original)


async def at_rest(args: argparse.Namespace) -> tuple[Counter[str], float, float, pstats.Stats | None]:
    from gpumon.core.gpu.simulated import SimulatedSource
    from gpumon.core.host import HostSource
    from gpumon.core.sampler import Sampler
    from gpumon.tui.app import GpumonApp

    sampler = Sampler(SimulatedSource(args.gpus, seed=1), HostSource(), interval=1.0)
    sampler.start()
    app = GpumonApp(sampler)
    count: Counter[str] = Counter()
    try:
        async with app.run_test(size=args.size) as pilot:
            await until(pilot, lambda: len(app.context.runs) == args.runs)
            await until(pilot, lambda: not app.drawing_unseen() and all(w.is_finished for w in app.workers))
            if args.keys:
                for key, _label, shows in steps(args.runs):
                    await pilot.press(key)
                    await until(pilot, lambda shows=shows: shows(app))
                    await pilot.pause(args.rest)
            await pilot.pause(2.0)
            ticks: list[int] = []
            post = sampler.on_sample
            sampler.on_sample = lambda snap: (ticks.append(1), post(snap))  # type: ignore[assignment, func-returns-value]
            while not ticks:  # from one sample's arrival to the one ``--ticks`` later
                await asyncio.sleep(0.01)
            profile = cProfile.Profile() if args.profile else None
            with hooks(count):
                started, cpu = time.monotonic(), time.thread_time()
                if profile is not None:
                    profile.enable()
                while len(ticks) <= args.ticks:  # asyncio's own sleep: a pilot's pause would post to every widget
                    await asyncio.sleep(0.05)
                if profile is not None:
                    profile.disable()
                took, ms = time.monotonic() - started, (time.thread_time() - cpu) * 1000
    finally:
        sampler.stop()
    stats = pstats.Stats(profile) if profile is not None else None
    return count, took, ms - count["ms_write_build"], stats


def size(text: str) -> tuple[int, int]:
    width, height = (int(part) for part in text.lower().split("x"))
    return width, height


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--gpus", type=int, default=2, help="simulated GPUs (default 2)")
    parser.add_argument("--rest", type=float, default=0.4)
    parser.add_argument("--keys", action="store_true", help="go round the views first (as bench/keys.py)")
    parser.add_argument("--size", type=size, default=(100, 30))
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N (cumulative)")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="gpumon-idle-counted-"))
    os.environ["GPUMON_HOME"] = str(home)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        write_runs(home, args.runs)
        count, took, ms, stats = asyncio.run(at_rest(args))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    n = args.ticks
    print(f"{n} ticks in {took:.1f} s, per tick (per sample):")
    print(f"  main thread ms  {ms / n:7.2f}   ({ms / took:.2f} ms/s)")
    for name in ("frames", "bytes", "widgets", "lines", "messages"):
        print(f"  {name:<15} {count[name] / n:7.2f}")
    groups = (("ms:", "ms"), ("w:", "widgets by class"), ("l:", "lines by class"), ("m:", "messages"), ("t:", "timers"))
    for prefix, title in groups:
        parts = sorted(
            ((k[len(prefix) :], v / n) for k, v in count.items() if k.startswith(prefix)), key=lambda p: -p[1]
        )
        print(f"  {title}: " + ", ".join(f"{k} {v:.2f}" for k, v in parts))
    if stats is not None:
        stats.sort_stats("cumulative").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
