"""Alerts (issue 26): how soon a run's end reaches a webhook, and what alerts configured cost a supervisor at rest.

1. latency: N runs launched by ``gpumon launch`` (half fail with sys.exit, half finish with ``on`` asking for
   finished), a stdlib HTTP receiver on 127.0.0.1; reported: the time from the script's last statement
   (the time it writes, just before it exits) to the webhook's arrival (the receiver's clock, the same machine).
   Goal: < 5 s.
2. at rest: a run that sleeps, supervised with ``[alerts]`` configured and without; reported: the supervisor's
   CPU seconds over the same window and its thread count (the delivery thread starts with the first alert).

3. the reader: ``AlertBook.read()`` (``gpumon alerts``, the Alerts view's worker every 2 s) over 2,000 run
   directories, 200 of them with an attempts file, 6 live (moved lately): the first read and the next ones.

Usage: python bench/alerts.py [--runs 10] [--rest 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from tests.alert_receiver import Receiver

GOAL_S = 5.0


def gpumon(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return done.stdout


def setup(root: Path, config: str) -> dict[str, str]:
    (root / "cfg").mkdir(parents=True, exist_ok=True)
    path = root / "cfg" / "config.toml"
    path.write_text(config)
    path.chmod(0o600)
    return {**os.environ, "GPUMON_HOME": str(root / "home"), "GPUMON_CONFIG_DIR": str(root / "cfg")}


def latency(runs: int) -> list[float]:
    receiver = Receiver().start()
    root = Path(tempfile.mkdtemp(prefix="gpumon-bench-alerts-"))
    env = setup(root, f'[alerts]\nwebhook = "{receiver.url}"\non = ["failed", "finished"]\n')
    last = "import sys, time\ntime.sleep(1)\nopen(sys.argv[1], 'w').write(repr(time.time()))\n"  # its last moment
    (root / "fails.py").write_text(last + "sys.exit('bad shard')\n")
    (root / "ends.py").write_text(last)
    delays = []
    for i in range(runs):
        mark = root / f"end-{i}"
        run_id = gpumon(env, root, "launch", "script", "fails.py" if i % 2 else "ends.py", "--", str(mark))
        run_id = run_id.split()[-1]
        deadline = time.monotonic() + 60
        while len(receiver.arrived) <= i and time.monotonic() < deadline:
            time.sleep(0.01)
        assert receiver.arrived[i]["run"] == run_id, receiver.arrived[i]
        delays.append(receiver.arrived_at[i] - float(mark.read_text()))
    receiver.stop()
    return delays


def at_rest(seconds: float, configured: bool) -> tuple[float, int]:
    receiver = Receiver().start()
    root = Path(tempfile.mkdtemp(prefix="gpumon-bench-alerts-rest-"))
    config = f'[alerts]\nwebhook = "{receiver.url}"\ncommand = ["true"]\n' if configured else ""
    env = setup(root, config)
    (root / "sleeps.py").write_text(f"import time\ntime.sleep({seconds + 10})\n")
    run_id = gpumon(env, root, "launch", "script", "sleeps.py").split()[-1]
    status_path = root / "home" / "runs" / run_id / "status.json"
    while "running" not in status_path.read_text():
        time.sleep(0.05)
    time.sleep(2)  # past the start
    sup = psutil.Process(json.loads(status_path.read_text())["supervisor_pid"])
    before = sum(sup.cpu_times()[:2])
    time.sleep(seconds)
    used = sum(sup.cpu_times()[:2]) - before
    threads = sup.num_threads()
    gpumon(env, root, "stop", run_id)
    receiver.stop()
    return used, threads


def reader(dirs: int = 2000) -> tuple[float, float]:
    from gpumon.core.alerts.history import AlertBook

    root = Path(tempfile.mkdtemp(prefix="gpumon-bench-alerts-book-"))
    old = time.time() - 3600
    for i in range(dirs):
        run = root / "runs" / f"script-{i:05d}"
        run.mkdir(parents=True)
        if i % 10 == 0:
            doc = {"type": "alert", "id": str(i), "kind": "failed", "text": "x", "t": old + i, "run": run.name}
            (run / "alerts.jsonl").write_text(json.dumps(doc) + "\n")
        if i >= 6:
            os.utime(run, (old, old))
    book = AlertBook(root)
    started = time.perf_counter()
    book.read()
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(50):
        book.read()
    return first, (time.perf_counter() - started) / 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rest", type=float, default=20.0)
    args = parser.parse_args()
    print(f"# {platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()} · {time.ctime()}")
    delays = latency(args.runs)
    print(f"run end -> webhook arrival over {len(delays)} runs: median {statistics.median(delays):.3f} s, "
          f"max {max(delays):.3f} s (goal < {GOAL_S:g} s): {'ok' if max(delays) < GOAL_S else 'MISSED'}")  # fmt: skip
    first, again = reader()
    print(f"AlertBook.read() over 2,000 run dirs (200 with alerts, 6 live): first {first * 1000:.1f} ms, "
          f"then {again * 1000:.1f} ms a read")  # fmt: skip
    for configured in (False, True):
        used, threads = at_rest(args.rest, configured)
        label = "[alerts] webhook + command" if configured else "no [alerts]             "
        print(f"supervisor at rest, {label}: {used:.3f} CPU s over {args.rest:g} s "
              f"({100 * used / args.rest:.2f}% of a core), {threads} thread(s)")  # fmt: skip


if __name__ == "__main__":
    main()
