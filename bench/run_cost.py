"""What a run costs, for a run of 20,000,000 steps and for 10,000 runs (issue 11).

- ``long``: one ended run of 20,000,000 steps (the bootstrap's events, a step event every 1,000th step as
  GPUMON_STEP_EVERY=1000 writes them, folded by the supervisor's own code): ``gpumon runs`` and
  ``gpumon doctor RUN`` as subprocesses (wall, peak RSS), and the Runs view (Pilot) until its row shows.
- ``many``: 10,000 ended runs + 5 live ones (real supervisors of sleeping scripts): ``gpumon runs`` and the
  Runs view's first paint; with ``--idle S``, the app's idle CPU in tmux against an empty state dir.
- ``live``: a real torch loop at ~3,000 optimizer steps a second under ``gpumon launch``: the supervisor's CPU,
  and the app's CPU and RSS while its Runs view shows the run (tmux), over ``--seconds``.
- ``disk``: bytes a rank writes per million steps: every step recorded (GPUMON_STEP_RATE=0) and as stored
  after the run (gzip), from a real run.

Usage: python bench/run_cost.py [long] [many] [live] [disk] [--idle 30] [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_run_cost import write_run  # noqa: E402  (the same generator the cost tests use)

FAST_LOOP = """
import time, torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(2, 4)
end, period, next_at = time.time() + float(__import__("sys").argv[1]), 1 / 3000, time.perf_counter()
while time.time() < end:
    opt.zero_grad(); model(x).sum().backward(); opt.step()
    next_at += period
    while time.perf_counter() < next_at:
        pass
"""

SLEEPER = "import time\ntime.sleep(3600)\n"


WRAP = (
    "import resource, subprocess, sys, time; t = time.perf_counter(); "
    "out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout; "
    "w = time.perf_counter() - t; peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss; "
    "sys.stdout.write(out + f'\\n{w} {peak}')"
)


def gpumon(*args: str) -> tuple[float, int, str]:
    """(wall s, peak RSS bytes, stdout) of one gpumon command, measured by a parent of its own."""
    done = subprocess.run(
        [sys.executable, "-c", WRAP, sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, check=True
    )
    out, _, last = done.stdout.rpartition("\n")
    wall, peak_kb = last.split()
    return float(wall), int(peak_kb) * 1024, out


async def first_paint(rows: int, run_id: str | None = None) -> float:
    """Seconds from pressing r until the Runs view shows ``rows`` rows (and ``run_id``'s detail)."""
    from gpumon.tui.views.runs.run_table import RunTable
    from tests.conftest import make_app

    app = make_app(gpus=1)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.2)
        started = time.perf_counter()
        await pilot.press("r")
        table = app.query_one(RunTable)
        while table.row_count < rows:
            await pilot.pause(0.01)
        return time.perf_counter() - started


def bench_long() -> None:
    import tests.test_run_cost as cost
    from gpumon.core.runs.record.store import RunStore

    cost.EVERY = 1_000
    path = write_run(RunStore(), 20_000_000, leak=True)
    raw = sum(p.stat().st_size for p in (path / "events").iterdir())
    print(f"long: a run of 20,000,000 steps ({raw / 1e6:.1f} MB of events at every 1,000th step)")
    for args in (("runs",), ("runs", "--json"), ("doctor", path.name)):
        wall, peak, _ = gpumon(*args)
        label = " ".join(args) if args[0] == "runs" else "doctor RUN"
        print(f"  gpumon {label}: {wall:.3f} s, peak RSS {peak / 1e6:.0f} MB")
    print(f"  Runs view, r to the run's row: {asyncio.run(first_paint(1)):.3f} s")


def bench_many(idle: float) -> None:
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch

    store = RunStore()
    template = write_run(store, 2_000)
    for n in range(9_999):
        copy = store.runs_dir / f"script-0101-{n // 100:06d}-{n:04x}"
        shutil.copytree(template, copy, ignore=shutil.ignore_patterns("events", "logs"))
    script = Path(tempfile.mkdtemp()) / "sleeper.py"
    script.write_text(SLEEPER)
    live = [launch(RunSpec(kind="script", program=str(script)), store, 0) for _ in range(5)]
    print("many: 10,000 ended runs + 5 live (a gpumon supervisor each)")
    gpumon("runs")  # the first listing reads the 9,999 copies' files once and indexes them
    for _ in range(2):
        wall, peak, out = gpumon("runs")
        print(f"  gpumon runs: {wall:.3f} s, peak RSS {peak / 1e6:.0f} MB ({len(out.splitlines()) - 1} runs)")
    print(f"  Runs view, r to the first page of 500 rows: {asyncio.run(first_paint(500)):.3f} s")
    wall, _, out = gpumon("runs", "--json", "--recent", "20")
    print(f"  gpumon runs --json --recent 20 (the fleet's runs poll before the stream): {wall:.3f} s, {len(out):,} B")
    stream_runs(20.0)
    if idle:
        idle_cpu(idle, "10,000 ended + 5 live")
    for record in live:
        subprocess.run([sys.executable, "-m", "gpumon", "stop", record.id, "--kill"], capture_output=True)
    if idle:
        os.environ["GPUMON_HOME"] = tempfile.mkdtemp(prefix="gpumon-empty-")
        idle_cpu(idle, "an empty state dir")


def stream_runs(seconds: float) -> None:
    """What a fleet's stream costs this host with its runs (``snapshot --watch --runs 20``, 1 s): the time
    to the first runs object, then CPU per line and bytes per line over ``seconds``."""
    import json

    argv = [sys.executable, "-m", "gpumon", "--simulate", "8", "snapshot", "--json", "--watch", "--fields", "fleet"]
    proc = subprocess.Popen([*argv, "--runs", "20"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        started = time.perf_counter()
        while "runs" not in json.loads(proc.stdout.readline()):
            pass
        first = time.perf_counter() - started
        watched = psutil.Process(proc.pid)
        before, lines, sizes, with_runs = watched.cpu_times(), 0, [], 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines, with_runs = lines + 1, with_runs + ("runs" in json.loads(line))
            sizes.append(len(line))
        after = watched.cpu_times()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    cpu = (after.user + after.system - before.user - before.system) / lines * 1000
    print(f"  snapshot --watch --runs 20 (8 GPUs, 1 s): first runs object after {first:.2f} s; then {cpu:.1f} ms CPU")
    print(f"    and {sum(sizes) / lines:,.0f} B per line over {lines} lines ({with_runs} carried runs, 5 live runs)")


def idle_cpu(seconds: float, label: str) -> None:
    from bench.idle_cpu import measure
    from bench.startup import tmux_server

    print(f"  idle CPU with {label}:")
    with tmux_server() as server:
        measure(server, 120, 40, 8, 1.0, seconds, 3.0)


def bench_live(seconds: float) -> None:
    from bench.startup import Pane, tmux_server
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, stop

    script = Path(tempfile.mkdtemp()) / "fast.py"
    script.write_text(FAST_LOOP)
    record = launch(RunSpec(kind="script", program=str(script), args=(str(seconds + 30),)), RunStore(), 0)
    supervisor = psutil.Process(record.status["supervisor_pid"])
    time.sleep(8)  # torch imported, the loop at speed
    with tmux_server() as server:
        pane = Pane(server, "live", 160, 50, [sys.executable, "-m", "gpumon", "--simulate", "1"])
        pane.start()
        pane.wait_frame(lambda text: "UTIL" in text)
        server.run("send-keys", "-t", "live", "r")
        time.sleep(3)
        app = pane.app_process("gpumon")
        a0, s0, rss0, t0 = sum(app.cpu_times()[:2]), sum(supervisor.cpu_times()[:2]), app.memory_info().rss, time.time()
        steps0 = _steps(record)
        time.sleep(seconds)
        a1, s1, rss1, t1 = sum(app.cpu_times()[:2]), sum(supervisor.cpu_times()[:2]), app.memory_info().rss, time.time()
        steps1 = _steps(record)
        pane.quit()
    stop(record, kill=True)
    rate = (steps1 - steps0) / (t1 - t0)
    print(f"live: a torch loop at {rate:,.0f} optimizer steps/s, {t1 - t0:.0f} s window")
    print(f"  supervisor CPU: {(s1 - s0) / (t1 - t0) * 100:.2f}% of one core")
    print(f"  app CPU while its Runs view shows the run: {(a1 - a0) / (t1 - t0) * 100:.2f}% of one core")
    print(f"  app RSS: {rss0 / 1e6:.1f} MB -> {rss1 / 1e6:.1f} MB")


def _steps(record: object) -> int:
    from gpumon.core.runs.reading.telemetry import RunTelemetry

    tele = RunTelemetry(record.dir)  # type: ignore[attr-defined]
    tele.update(events=False)
    return tele.optimizer_steps or 0


def bench_disk() -> None:
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, wait

    script = Path(tempfile.mkdtemp()) / "fast.py"
    script.write_text(FAST_LOOP)
    store = RunStore()
    for rate in ("0", "200"):
        spec = RunSpec(kind="script", program=str(script), args=("10",), env=(("GPUMON_STEP_RATE", rate),))
        final = wait(launch(spec, store, 0), store, timeout=120)
        deadline = time.monotonic() + 30
        while "event_bytes" not in final.status and time.monotonic() < deadline:  # written just after the end
            time.sleep(0.2)
            final = store.load(final.dir) or final
        tele_steps = _steps(final)
        sizes = final.status["event_bytes"]
        per_m = {k: v / tele_steps * 1e6 for k, v in sizes.items()}
        label = "every step" if rate == "0" else f"at most {rate} steps/s"
        day = {k: v / tele_steps * 864_000 / 1e6 for k, v in sizes.items()}  # 10 steps/s, every step recorded
        print(f"disk ({label}, {tele_steps:,} steps at ~3,000/s): per million steps")
        print(f"  raw {per_m['raw'] / 1e6:.1f} MB, stored {per_m['stored'] / 1e6:.1f} MB")
        print(f"  a day at 10 steps/s (every step recorded): {day['raw']:.0f} MB raw, {day['stored']:.0f} MB stored")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="*", default=["long", "many", "live", "disk"])
    parser.add_argument("--idle", type=float, default=0.0, help="idle CPU window in seconds (0: skip)")
    parser.add_argument("--seconds", type=float, default=60.0, help="the live run's window")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    for part in args.parts:
        os.environ["GPUMON_HOME"] = tempfile.mkdtemp(prefix=f"gpumon-{part}-")
        {"long": bench_long, "many": lambda: bench_many(args.idle), "live": lambda: bench_live(args.seconds),
         "disk": bench_disk}[part]()  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
