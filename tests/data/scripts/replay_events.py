"""Replay a rank's recorded events into the run's folder, as that rank wrote them, for hardware the tests lack.

    python replay_events.py EVENTS.jsonl [--gap SECONDS] [--alerts-before-oom KIND,KIND]

Each line goes to ``$GPUMON_RUN_DIR/events/<src>.<pid>.jsonl`` with one ``os.write``, its time shifted so the first
event is now and its pid this process's. An ``oom_snapshot`` also leaves its ``snapshot`` file (a pickled snapshot
of the blocks it lists), as the rank's OOM observer does. An ``exception`` is printed as its traceback and ends the
script with status 1, as the rank's uncaught error would. ``--alerts-before-oom``: the OOM waits (30 s at most)
until the supervisor has raised those alerts, as a real run's steps would have given it the time to.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("events")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between two events")
    parser.add_argument("--alerts-before-oom", default="", help="alert kinds the supervisor raises before the OOM")
    args = parser.parse_args()
    run_dir = os.environ["GPUMON_RUN_DIR"]
    with open(args.events, encoding="utf-8") as f:
        lines = [line for line in f if line.strip() and not line.startswith("#")]
    events = [json.loads(line) for line in lines]
    shift = time.time() - events[0]["t"]
    files: dict[str, int] = {}
    for event in events:
        event["t"] += shift
        event["pid"] = os.getpid()
        src = event["src"]
        if src not in files:
            path = os.path.join(run_dir, "events", f"{src}.{os.getpid()}.jsonl")
            files[src] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if event["type"] == "oom_snapshot" and args.alerts_before_oom:
            wait_for_alerts(run_dir, set(args.alerts_before_oom.split(",")))
        if event["type"] == "oom_snapshot" and event.get("snapshot"):
            blocks = [{"size": b["size"], "state": "active_allocated", "frames": []} for b in event["largest"]]
            os.makedirs(os.path.join(run_dir, "pymem"), exist_ok=True)
            with open(os.path.join(run_dir, event["snapshot"]), "wb") as out:
                pickle.dump({"segments": [{"device": 0, "blocks": blocks}], "device_traces": [[]]}, out)
        os.write(files[src], (json.dumps(event, separators=(",", ":")) + "\n").encode())
        if event["type"] == "exception":
            print(f"Traceback (most recent call last):\n{event['traceback']}{event['exc_type']}: {event['message']}",
                  file=sys.stderr)  # fmt: skip
            return 1
        time.sleep(args.gap)
    return 0


def wait_for_alerts(run_dir: str, kinds: set[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = set()
        for name in os.listdir(os.path.join(run_dir, "events")):
            if name.startswith("launcher."):
                with open(os.path.join(run_dir, "events", name), encoding="utf-8") as f:
                    seen |= {json.loads(line).get("kind") for line in f if '"alert"' in line}
        if kinds <= seen:
            return
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
