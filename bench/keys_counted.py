"""What each key of bench/keys.py costs the main thread up to the frame that shows its screen, counted headless.

Textual's test runner (100x30, ``--simulate 2`` as a real sampler thread ticking each second, ``--runs`` recorded
runs in a state dir of its own) goes ``--repeat`` times round the keys of bench/keys.py. For each key it counts,
from just before the key is sent to the end of the first frame that shows the key's screen (the compositor's
update handed to the display, headless: not written):

    ms       the main thread's CPU (time.thread_time: a loaded machine changes it little)
    styles   nodes styled (Stylesheet.apply)     passes  style passes (Stylesheet.update_nodes)
    layouts  layouts of a screen                  mounts  widgets registered
    renders  widgets whose content was rendered   lines   lines composited (render_lines)

and the same after that frame until the app is idle again (``then``: what the key left for later frames).
Prints the median per key over the rounds (the first round apart: it may still find something unbuilt).

``--classes``: what was rendered, measured (content width, height) and laid out up to each key's frame, by widget
class, where the first round differs from the second (what a first press still does that a later one does not).

Usage: PYTHONPATH=. python bench/keys_counted.py [--runs 20] [--repeat 6] [--classes]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from keys import write_runs

COUNTS = ("ms", "styles", "passes", "layouts", "mounts", "renders", "lines", "frames")
# main-thread ms inside: style passes, layouts' reflows, frames' compositing, a view switch, a push or pop of a screen
TIMES = ("ms_style", "ms_reflow", "ms_frame", "ms_show", "ms_screen")


WIDGETS: list[bool] = []  # --widgets
CLASSES: list[bool] = []  # --classes


class Counter:
    def __init__(self) -> None:
        self.n = dict.fromkeys(COUNTS + TIMES, 0.0)

    def add(self, name: str, amount: float = 1) -> None:
        self.n[name] = self.n.get(name, 0.0) + amount


@contextmanager
def hooks(counter: Counter, on_frame: Callable[[], None]) -> Iterator[None]:
    from textual._compositor import Compositor
    from textual.app import App
    from textual.css.stylesheet import Stylesheet
    from textual.screen import Screen
    from textual.widget import Widget

    from gpumon.tui.app import GpumonApp

    real: list[tuple[Any, str, Any]] = []

    def wrap(
        owner: Any, name: str, before: Callable[..., None] | None = None, after: Any = None, timed: str = ""
    ) -> None:
        original = getattr(owner, name)
        real.append((owner, name, original))
        depth = [0]

        def hooked(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                before(*args, **kwargs)
            started = time.thread_time()
            depth[0] += 1
            try:
                result = original(*args, **kwargs)
            finally:
                depth[0] -= 1
                if timed and not depth[0]:
                    counter.add(timed, (time.thread_time() - started) * 1000)
            if after is not None:
                after(*args, **kwargs)
            return result

        setattr(owner, name, hooked)

    wrap(Stylesheet, "apply", lambda sheet, node, **k: counter.add("styles") or counter.add(f"s:{node!r}"))
    wrap(Stylesheet, "update_nodes", lambda *a, **k: counter.add("passes"), timed="ms_style")
    wrap(Screen, "_refresh_layout", lambda *a, **k: counter.add("layouts"))
    wrap(Compositor, "reflow", timed="ms_reflow")
    wrap(Compositor, "render_update", timed="ms_frame")
    wrap(GpumonApp, "show_view", timed="ms_show")
    wrap(App, "push_screen", timed="ms_screen")
    wrap(App, "pop_screen", timed="ms_screen")
    wrap(App, "_register", lambda *a, **k: counter.add("mounts"))
    wrap(Widget, "_render_content", lambda *a, **k: counter.add("renders"))
    wrap(Widget, "render_lines", lambda self, crop: counter.add("lines", crop.height))
    if CLASSES:  # what was rendered, measured or laid out, by widget class (--classes)
        wrap(Widget, "_render_content", lambda self: counter.add(f"c:render {type(self).__name__}"))
        wrap(Widget, "get_content_width", lambda self, *a: counter.add(f"c:width of {type(self).__name__}"))
        wrap(Widget, "get_content_height", lambda self, *a: counter.add(f"c:height of {type(self).__name__}"))
        wrap(Screen, "_refresh_layout", lambda self, *a, **k: counter.add(f"c:layout of {type(self).__name__}"))
    if WIDGETS:  # each widget class's own lines, timed (--widgets)
        original_lines = Widget.render_lines

        def lines_timed(self: Any, crop: Any) -> Any:
            started = time.thread_time()
            try:
                return original_lines(self, crop)
            finally:
                counter.add(f"w:{type(self).__name__}", (time.thread_time() - started) * 1000)

        real.append((Widget, "render_lines", original_lines))
        Widget.render_lines = lines_timed  # type: ignore[method-assign]

    def frame(app: Any, screen: Any, renderable: Any) -> None:
        if renderable is not None:
            counter.add("frames")
            on_frame()

    wrap(App, "_display", after=frame)
    try:
        yield
    finally:
        for owner, name, original in reversed(real):
            setattr(owner, name, original)


def steps(runs: int) -> list[tuple[str, str, Callable[[Any], bool]]]:
    """(key as the pilot names it, label, the app state its frame shows), as bench/keys.py goes round."""
    from gpumon.tui.views.runs.launch_form import LaunchForm
    from gpumon.tui.widgets.screens import HelpScreen

    def base(app: Any) -> bool:
        return app.screen is app.screen_stack[0]

    def view(name: str) -> Callable[[Any], bool]:
        return lambda app: base(app) and app.view == name

    return [
        ("r", "r     GPUs -> Runs", view("runs")),
        ("n", "n     the launch form", lambda app: isinstance(app.screen, LaunchForm)),
        ("escape", "esc   the form closes", view("runs")),
        ("g", "g     Runs -> GPUs", view("gpus")),
        ("t", "t     GPUs -> Trials", view("trials")),
        ("d", "d     Trials -> Doctor", view("doctor")),
        ("h", "h     Doctor -> Fleet", view("fleet")),
        ("exclamation_mark", "!     Fleet -> Alerts", view("alerts")),
        ("g", "g     Alerts -> GPUs", view("gpus")),
        ("question_mark", "?     the help", lambda app: isinstance(app.screen, HelpScreen)),
        ("escape", "esc   the help closes", view("gpus")),
    ]


async def go_round(args: argparse.Namespace) -> dict[str, list[tuple[dict[str, float], dict[str, float]]]]:

    from gpumon.core.gpu.simulated import SimulatedSource
    from gpumon.core.host import HostSource
    from gpumon.core.sampler import Sampler
    from gpumon.tui.app import GpumonApp

    sampler = Sampler(SimulatedSource(2, seed=1), HostSource(), interval=1.0)
    sampler.start()
    app = GpumonApp(sampler)
    seen: dict[str, list[tuple[dict[str, float], dict[str, float]]]] = {}
    profiles: list[cProfile.Profile] = []
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: len(app.context.runs) == args.runs)
            await pilot.pause(2.0)  # the build-ahead (1 s after the start) and its frames
            for _ in range(args.repeat):
                for key, label, shows in steps(args.runs):
                    profile = cProfile.Profile() if args.profile and label.startswith(args.profile) else None
                    seen.setdefault(label, []).append(await one_key(pilot, key, shows, profile))
                    if profile is not None:
                        profiles.append(profile)
                    await pilot.pause(args.rest)
    finally:
        sampler.stop()
    if profiles:
        stats = pstats.Stats(profiles[-1])
        for more in profiles[1:-1]:
            stats.add(more)
        stats.sort_stats("cumulative").print_stats(args.lines)
    return seen


async def until(pilot: Any, what: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        await pilot.pause(0.05)


async def one_key(
    pilot: Any, key: str, shows: Callable[[Any], bool], profile: cProfile.Profile | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    app = pilot.app
    counter = Counter()
    at_frame: dict[str, float] = {}
    started = time.thread_time()

    def on_frame() -> None:
        if not at_frame and shows(app):
            if profile is not None:
                profile.disable()
            counter.n["ms"] = (time.thread_time() - started) * 1000
            at_frame.update(counter.n)

    with hooks(counter, on_frame):
        if profile is not None:
            profile.enable()
        await pilot.press(key)
        await until(pilot, lambda: bool(at_frame), timeout=20)
        await pilot.pause(0.3)  # what the key left for later frames (a read, a pending sample)
        counter.n["ms"] = (time.thread_time() - started) * 1000
    then = {name: counter.n[name] - at_frame.get(name, 0.0) for name in counter.n}
    return at_frame, then


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--rest", type=float, default=0.4)
    parser.add_argument("--profile", default="", help="a key's label start ('g     Runs'): its profile to the frame")
    parser.add_argument("--lines", type=int, default=60, help="lines of the profile (default 60)")
    parser.add_argument("--widgets", action="store_true", help="time each widget class's render_lines")
    parser.add_argument("--classes", action="store_true", help="renders, measures, layouts by class: round 1 | 2")
    args = parser.parse_args()
    if args.widgets:
        WIDGETS.append(True)
    if args.classes:
        CLASSES.append(True)
    home = Path(tempfile.mkdtemp(prefix="gpumon-keys-counted-"))
    os.environ["GPUMON_HOME"] = str(home)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        write_runs(home, args.runs)
        seen = asyncio.run(go_round(args))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"median over rounds 2-{args.repeat}, to the key's frame | after it (0.3 s)")
    for names in (COUNTS, TIMES):
        print(f"  {'key':<24}" + "".join(f"{c:>9}" for c in names) + " |" + "".join(f"{c:>9}" for c in names))
        for label, rounds in seen.items():
            later = rounds[1:] or rounds
            to_frame = [statistics.median(r[0][c] for r in later) for c in names]
            after = [statistics.median(r[1][c] for r in later) for c in names]
            row = "".join(f"{v:9.0f}" for v in to_frame) + " |" + "".join(f"{v:9.0f}" for v in after)
            print(f"  {label:<24}{row}")
    print("round 1 (the first press of each key), to the key's frame")
    print(f"  {'key':<24}" + "".join(f"{c:>9}" for c in COUNTS))
    for label, rounds in seen.items():
        print(f"  {label:<24}" + "".join(f"{rounds[0][0][c]:9.0f}" for c in COUNTS))
    print("main-thread ms to the key's frame, by round:")
    for label, rounds in seen.items():
        print(f"  {label:<24} " + " ".join(f"{r[0]['ms']:5.0f}" for r in rounds))
    if CLASSES:
        print("rendered, measured, laid out to the key's frame where round 1 differs from round 2: round 1 | round 2")
        for label, rounds in seen.items():
            first, second = ({n[2:]: v for n, v in r[0].items() if n[:2] == "c:"} for r in (rounds + rounds)[:2])
            names = sorted(n for n in {*first, *second} if first.get(n, 0) != second.get(n, 0))
            print(f"  {label:<24} " + "; ".join(f"{n} {first.get(n, 0):.0f} | {second.get(n, 0):.0f}" for n in names))
    if WIDGETS:
        print("nodes styled to the key's frame (last round):")
        for label, rounds in seen.items():
            print(f"  {label:<24} " + ", ".join(n[2:] for n in rounds[-1][0] if n.startswith("s:")))
        print("render_lines ms per widget class, to the key's frame (median), then after it:")
        for label, rounds in seen.items():
            later = rounds[1:] or rounds
            names = sorted({n for r in later for n in r[0] if n.startswith("w:")})
            parts = [(n[2:], statistics.median(r[0].get(n, 0.0) for r in later)) for n in names]
            shown = ", ".join(f"{n} {v:.1f}" for n, v in sorted(parts, key=lambda p: -p[1]) if v >= 0.5)
            print(f"  {label:<24} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
