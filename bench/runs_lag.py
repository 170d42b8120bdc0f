"""How far the Runs table lags its run's log (issue 50), for a real run.

A torch loop under ``gpumon launch script`` prints ``step N`` every ``--period`` s. A thread of this bench
follows the run's log file (every 2 ms) and notes when each step's line appears in it; the app, in tmux
(``gpumon --simulate 1``, its Runs view open on the run), is captured every ~10 ms, and the first capture whose
row shows step >= N gives step N's delay. Prints the delays' median, 90th percentile and maximum (a capture
takes a few ms: each delay is late by up to one capture), the share within the 0.5 s goal, and the app's CPU
over the window (the Runs view on the live run).

Usage: python bench/runs_lag.py [--seconds 30] [--period 0.05] [--size 160x50]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

GOAL_S = 0.5
STEPPER = """
import sys, time, torch
period, seconds = float(sys.argv[1]), float(sys.argv[2])
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end, step = time.monotonic() + seconds, 0
while time.monotonic() < end:
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    step += 1
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(period)
"""
LINE = re.compile(rb"^step (\d+) ", re.M)
DURATION = re.compile(r"^\d+[smhd]")


class LogWatch(threading.Thread):
    """When each ``step N`` line first appears in the log file (monotonic seconds)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.seen, self.stop = path, {}, threading.Event()

    def run(self) -> None:
        offset, partial = 0, b""
        while not self.stop.is_set():
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
            except FileNotFoundError:
                data = b""
            now = time.monotonic()
            if data:
                offset += len(data)
                text, _, partial = (partial + data).rpartition(b"\n")
                for match in LINE.finditer(text):
                    self.seen.setdefault(int(match.group(1)), now)
            time.sleep(0.002)


def row_step(screen: str, short_id: str) -> int | None:
    """The STEP cell of the run's row: the token after the elapsed time ("running 12s 240 ...")."""
    for line in screen.splitlines():
        if short_id in line:
            tokens = line.replace("│", " ").split()
            for i, token in enumerate(tokens[:-1]):
                if DURATION.match(token) and tokens[i + 1].isdigit():
                    return int(tokens[i + 1])
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="the measured window")
    parser.add_argument("--period", type=float, default=0.05, help="seconds between the script's steps")
    parser.add_argument("--size", default="160x50")
    args = parser.parse_args()
    width, height = (int(x) for x in args.size.split("x"))
    home = Path(tempfile.mkdtemp(prefix="gpumon-lag-"))
    os.environ.update(GPUMON_HOME=str(home), PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    from startup import Pane, tmux_server

    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import stop

    script = home / "stepper.py"
    script.write_text(STEPPER)
    launch = [sys.executable, "-m", "gpumon", "launch", "script", str(script), "--env", "OMP_NUM_THREADS=1"]
    done = subprocess.run([*launch, "--", str(args.period), str(args.seconds + 60)], capture_output=True, text=True)
    run_id = done.stdout.strip().splitlines()[-1].split()[-1]
    record = RunStore(home).load(home / "runs" / run_id)
    assert record is not None, done.stderr
    watch = LogWatch(record.log_path(0))
    watch.start()
    shown: dict[int, float] = {}
    try:
        with tmux_server() as server:
            pane = Pane(server, "lag", width, height, [sys.executable, "-m", "gpumon", "--simulate", "1"])
            pane.start()
            pane.wait_frame(lambda text: "UTIL" in text)
            server.run("send-keys", "-t", "lag", "r")
            short = run_id.split("-")[0] + "-" + run_id.split("-")[-1]
            key = run_id if width >= 140 else short
            pane.wait_frame(lambda text: row_step(text, key) is not None, timeout=60)
            app = pane.app_process("gpumon")
            cpu0, t0 = sum(app.cpu_times()[:2]), time.monotonic()
            last = 0
            while time.monotonic() - t0 < args.seconds:
                step = row_step(pane.capture(), key)
                now = time.monotonic()
                if step is not None and step > last:
                    for n in range(last + 1, step + 1):
                        shown[n] = now
                    last = step
                time.sleep(0.01)
            cpu = (sum(app.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0) * 100
            pane.quit()
    finally:
        watch.stop.set()
        stop(RunStore(home).load(record.dir) or record, kill=True)
    delays = sorted(shown[n] - watch.seen[n] for n in shown if n in watch.seen and watch.seen[n] >= t0)
    if not delays:
        print("no step was seen in both the log and the row")
        return 1
    p90 = delays[int(0.9 * (len(delays) - 1))]
    within = sum(d <= GOAL_S for d in delays) / len(delays)
    print(f"runs lag: a step every {args.period:g} s, {len(delays)} steps over {args.seconds:g} s, tmux {args.size}")
    print(f"  log line -> Runs row: median {statistics.median(delays) * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms,")
    print(f"  max {delays[-1] * 1000:.0f} ms; within {GOAL_S:g} s: {within:.1%}")
    print(f"  app CPU with its Runs view on the run: {cpu:.2f}% of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
