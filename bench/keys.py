"""Key-to-screen latency of the gpumon TUI in a real terminal (tmux), as htop's keys are measured.

Starts ``gpumon --simulate 2 --interval 1`` in a detached tmux session (100x30 by default) on a
state dir of its own holding ``--runs`` recorded runs (finished, 2 ranks, 200 steps of loss and
memory each, as the supervisor and the telemetry write them), waits for the first full frame and a
settle, then goes round the views ``--repeat`` times:

    r (GPUs -> Runs), n (the launch form opens), escape (it closes), g (Runs -> GPUs),
    t (Trials), d (Doctor), h (Fleet), ! (Alerts), g (Alerts -> GPUs), ? (help), escape

Each key is sent with ``tmux send-keys`` and the pane is read with ``tmux capture-pane -p`` about
every 5 ms until it shows the screen the key leads to (a text only that screen draws); the latency
is from just before ``send-keys`` to that read (so it includes the tmux client's start, as the
reference does). Between keys it rests ``--rest`` seconds (default 0.4): a human's pace, and the
1 s sampler keeps ticking during some keys as it does in use.

With htop on the PATH, the same method times htop's F6 (its sort menu opens; escape closes it) in a
pane of the same size, as the reference. Prints median, p90 and max per key, the load average
before and after, and the goal: every key 50 ms median, 100 ms p90. The ``cpu`` column is the median
CPU time gpumon's process used from the key to its screen (all threads: a sample tick that falls in the
window counts too), a figure a loaded machine changes less than the wall time.

Then, unless ``--idle 0``, the idle CPU of each (user + system, all threads, percent of one core) over
``--idle`` seconds (default 60) at rest on its first screen, in the same pane size; the goal: gpumon at
most 2x htop. (htop redraws every 1.5 s by default, gpumon samples every 1 s here; so htop is measured at
``-d 10`` too, a frame a second as gpumon, after its default.)

Usage: python bench/keys.py [--runs 20] [--repeat 20] [--size 100x30] [--rest 0.4] [--idle 60] [--no-htop]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil
from startup import HarnessError, Pane, TmuxServer, full_frame, gpumon_command, tmux_server

GOAL_MEDIAN_S = 0.050
GOAL_P90_S = 0.100
GOAL_IDLE_X = 2.0  # gpumon's idle CPU at most this many times htop's
POLL_S = 0.005
KEY_TIMEOUT_S = 20.0
T0 = 1_795_000_000.0

Check = Callable[[str], bool]


def has(*texts: str) -> Check:
    return lambda screen: all(t in screen for t in texts)


def lacks(text: str, then: Check) -> Check:
    return lambda screen: text not in screen and then(screen)


def steps(runs: int) -> list[tuple[str, str, Check]]:
    """(key as tmux names it, label, the screen it leads to)."""
    runs_view = has(f"runs · {runs}")
    gpus_view = has("processes · GPU 0")
    return [
        ("r", "r     GPUs -> Runs", lacks("processes · GPU", runs_view)),
        ("n", "n     the launch form", has("New run", "on alert", "Launch")),
        ("Escape", "esc   the form closes", lacks("New run", runs_view)),
        ("g", "g     Runs -> GPUs", lacks("runs · ", gpus_view)),
        ("t", "t     GPUs -> Trials", lacks("processes · GPU", has("Ray Tune"))),
        ("d", "d     Trials -> Doctor", lacks("Ray Tune", has("doctor · "))),
        ("h", "h     Doctor -> Fleet", lacks("doctor · ", has("host (1 live)"))),
        ("!", "!     Fleet -> Alerts", lacks("host (1 live)", has("no alerts yet"))),
        ("g", "g     Alerts -> GPUs", lacks("no alerts yet", gpus_view)),
        ("?", "?     the help", has("gpumon keys")),
        ("Escape", "esc   the help closes", lacks("gpumon keys", gpus_view)),
    ]


def write_runs(home: Path, count: int) -> None:
    """``count`` finished runs as the supervisor and the telemetry leave them (what the Runs view lists)."""
    from gpumon.core.events import EventWriter, encode
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import write_json

    for i in range(count):
        run_dir = home / "runs" / f"ddp-1121-{100000 + i * 100:06d}-{i:04x}"
        (run_dir / "logs").mkdir(parents=True)
        write_json(run_dir / "spec.json", RunSpec(kind="ddp", nproc=2, cwd="/tmp").to_dict())
        started = T0 + i * 600
        status = {"state": "finished", "created": started, "started": started, "ended": started + 300, "exit_code": 0}
        write_json(run_dir / "status.json", status)
        (run_dir / "logs" / "rank0.log").write_text("".join(f"step {s} loss 0.5\n" for s in range(1, 201)))
        for rank in range(2):
            writer = EventWriter(run_dir, f"rank{rank}")
            writer.write("proc_start", rank=rank)
            for step in range(1, 201):
                if rank == 0:
                    writer.write("metrics", step=step, metrics={"loss": 2.3 * math.exp(-step / 60) + 0.05})
                fields = {"step": step, "dev": "cpu", "heap": 50_000_000 + step * 7800, "rss": 100_000_000}
                writer.write_line(encode("step", f"rank{rank}", fields, now=started + step * 1.5))  # its own clock
            writer.close()


def press(pane: Pane, key: str, shows: Check) -> float:
    """Send ``key``; seconds until the pane shows what ``shows`` wants."""
    before = pane.capture()
    if shows(before):
        raise HarnessError(f"the screen already shows what {key!r} leads to:\n{before}")
    started = time.perf_counter()
    pane.server.run("send-keys", "-t", pane.name, key)
    deadline = started + KEY_TIMEOUT_S
    while True:
        polled = time.perf_counter()
        screen = pane.capture()
        if shows(screen):
            return time.perf_counter() - started
        if polled > deadline:
            raise HarnessError(f"{key!r} never led to its screen in {KEY_TIMEOUT_S:.0f} s; the pane shows:\n{screen}")
        time.sleep(max(0.0, POLL_S - (time.perf_counter() - polled)))


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:5.0f}"


def report(label: str, times: list[float], cpu: list[float] | None = None) -> bool:
    median, tail = statistics.median(times), p90(times)
    met = median <= GOAL_MEDIAN_S and tail <= GOAL_P90_S
    spent = f"{ms(statistics.median(cpu))}" if cpu else "    -"
    print(f"  {label:<24} {ms(median)}  {ms(tail)}  {ms(max(times))}  {spent}   {'met' if met else 'MISSED'}")
    return met


def cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def idle_cpu(pane: Pane, marker: str, seconds: float) -> float:
    """Percent of one core the pane's app used over ``seconds`` left alone."""
    proc = pane.app_process(marker)
    before, started = proc.cpu_times(), time.perf_counter()
    time.sleep(seconds)
    after, ended = proc.cpu_times(), time.perf_counter()
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / (ended - started)


def gpumon_keys(
    server: TmuxServer, args: argparse.Namespace, home: Path, idle: dict[str, float], cpu: dict[str, list[float]]
) -> dict[str, list[float]]:
    width, height = args.size
    command = ["env", f"GPUMON_HOME={home}", gpumon_command(), "--simulate", "2", "--interval", "1"]
    pane = Pane(server, "keys-gpumon", width, height, command)
    times: dict[str, list[float]] = {}
    try:
        pane.start()
        pane.wait_frame(full_frame)
        time.sleep(args.settle)
        proc = pane.app_process("gpumon")
        for _ in range(args.repeat):
            for key, label, shows in steps(args.runs):
                spent = cpu_s(proc)
                times.setdefault(label, []).append(press(pane, key, shows))
                cpu.setdefault(label, []).append(cpu_s(proc) - spent)  # the key's work, any sample tick's too
                time.sleep(args.rest)
        if args.idle > 0:
            time.sleep(args.settle)
            idle["gpumon"] = idle_cpu(pane, "gpumon", args.idle)
        if pane.quit() != 0:
            print("  WARNING: gpumon did not quit cleanly on q")
    finally:
        pane.kill()
    return times


def htop_keys(server: TmuxServer, args: argparse.Namespace, idle: dict[str, float]) -> dict[str, list[float]]:
    width, height = args.size
    pane = Pane(server, "keys-htop", width, height, ["htop"])
    times: dict[str, list[float]] = {"htop F6 (sort menu)": [], "htop esc (menu closes)": []}
    try:
        pane.start()
        pane.wait_frame(has("PID", "Command"))
        time.sleep(args.settle)
        for _ in range(args.repeat):
            times["htop F6 (sort menu)"].append(press(pane, "F6", has("Sort by")))
            time.sleep(args.rest)
            times["htop esc (menu closes)"].append(press(pane, "Escape", lacks("Sort by", has("PID"))))
            time.sleep(args.rest)
        if args.idle > 0:
            time.sleep(args.settle)
            idle["htop"] = idle_cpu(pane, "htop", args.idle)
        pane.server.run("send-keys", "-t", pane.name, "q")
    finally:
        pane.kill()
    if args.idle > 0:  # htop redraws every 1.5 s by default; at gpumon's 1 s too, frame for frame
        pane = Pane(server, "keys-htop-1s", width, height, ["htop", "-d", "10"])
        try:
            pane.start()
            pane.wait_frame(has("PID", "Command"))
            time.sleep(args.settle)
            idle["htop -d 10"] = idle_cpu(pane, "htop", args.idle)
            pane.server.run("send-keys", "-t", pane.name, "q")
        finally:
            pane.kill()
    return times


def size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes WIDTHxHEIGHT, e.g. 100x30, not {text!r}") from None
    return width, height


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="recorded runs in the state dir (default 20)")
    parser.add_argument("--repeat", type=int, default=20, help="rounds of the views (default 20)")
    parser.add_argument("--size", type=size, default=(100, 30), help="terminal size, WIDTHxHEIGHT (default 100x30)")
    parser.add_argument("--rest", type=float, default=0.4, help="seconds between keys (default 0.4)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after the first frame (default 2)")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle CPU per app, 0: none (default 60)")
    parser.add_argument("--no-htop", action="store_true", help="skip the htop reference")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.repeat < 1:
        parser.error("--runs and --repeat must be at least 1")
    print(f"load average at start: {load()} ({os.cpu_count()} CPUs)")
    home = Path(tempfile.mkdtemp(prefix="gpumon-keys-"))
    try:
        write_runs(home, args.runs)
        with tmux_server() as server:
            idle: dict[str, float] = {}
            cpu: dict[str, list[float]] = {}
            times = gpumon_keys(server, args, home, idle, cpu)
            reference = htop_keys(server, args, idle) if shutil.which("htop") and not args.no_htop else {}
    except (HarnessError, OSError, subprocess.SubprocessError) as err:
        print(f"keys bench failed: {err}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
    width, height = args.size
    print(f"load average at end: {load()}")
    print(
        f"key -> screen drawn, ms (tmux {width}x{height}, gpumon --simulate 2, {args.runs} runs, "
        f"{args.repeat} rounds, pane read every {POLL_S * 1000:.0f} ms)"
    )
    goal = f"goal {GOAL_MEDIAN_S * 1000:.0f}/{GOAL_P90_S * 1000:.0f}"
    print(f"  {'key':<24} {'median':>5}  {'p90':>5}  {'max':>5}  {'cpu':>5}   {goal}")
    met = [report(label, values, cpu.get(label)) for label, values in times.items()]
    for label, values in reference.items():
        report(label, values)
    if not reference:
        print("  (htop not on the PATH: no reference)" if not args.no_htop else "  (--no-htop)")
    print(f"goal (every key {GOAL_MEDIAN_S * 1000:.0f} ms median, {GOAL_P90_S * 1000:.0f} ms p90): "
          f"{'met' if all(met) else 'MISSED'}")  # fmt: skip
    if idle:
        print(f"idle CPU over {args.idle:.0f} s, % of one core (same {width}x{height} pane):")
        for name, percent in idle.items():
            print(f"  {name:<8} {percent:5.2f}")
        if "gpumon" in idle and idle.get("htop"):
            ratio = idle["gpumon"] / idle["htop"]
            verdict = "met" if ratio <= GOAL_IDLE_X else "MISSED"
            print(f"  gpumon / htop: {ratio:.1f}x (goal at most {GOAL_IDLE_X:.0f}x: {verdict})")
        if "gpumon" in idle and idle.get("htop -d 10"):
            print(f"  gpumon / htop -d 10 (both a frame a second): {idle['gpumon'] / idle['htop -d 10']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
