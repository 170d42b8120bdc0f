"""A queue to test against: its own state dir, simulated GPUs driven through a state file, real CPU runs,
and a teardown that ends every keeper and run it started, even when the test failed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpumon.core.runs.supervision.liveness import flock_holder

GIB = 1024**3
TOTAL = 80 * GIB
# Prints the GPUs it got (and the order CUDA counts them in), then waits for its release file (or HOLD
# seconds), then exits with EXIT.
SCRIPT = """\
import os, sys, time
print("CVD", os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"), flush=True)
release = os.environ.get("RELEASE")
deadline = time.monotonic() + float(os.environ.get("HOLD", "60"))
while time.monotonic() < deadline and not (release and os.path.exists(release)):
    time.sleep(0.05)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


class Queue:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.state = tmp / "gpus.json"
        (tmp / "job.py").write_text(SCRIPT)
        self.env = {
            **os.environ,
            "GPUMON_HOME": str(self.home),
            "CUDA_VISIBLE_DEVICES": "",
            "GPUMON_SIMULATE_STATE": str(self.state),
            "GPUMON_QUEUE_SETTLE_S": "0.5",
            "GPUMON_QUEUE_INTERVAL_S": "0.2",
        }
        self.gpus([None, None])

    def gpus(self, users: list[int | None]) -> None:
        """One GPU per item: None is free, N GiB is alice's pid 1234 using that much."""
        gpus: list[dict[str, Any]] = []
        for gib in users:
            procs = (
                [] if gib is None else [{"pid": 1234, "user": "alice", "command": "python train.py", "used": gib * GIB}]
            )
            gpus.append({"total": TOTAL, "processes": procs})
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"gpus": gpus}))
        os.replace(tmp, self.state)

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", *args],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            cwd=self.tmp,
            timeout=120,
        )

    def queue(self, *options: str, env: dict[str, str] | None = None) -> str:
        """Queue job.py; its id. ``env``: the job's own (RELEASE, HOLD, EXIT)."""
        extra = [f"--env={k}={v}" for k, v in (env or {}).items()]
        done = self.cli("launch", "script", "job.py", "--queue", *options, *extra)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1].split()[-1]

    def release(self, run: str) -> str:
        return str(self.tmp / f"release-{run}")

    def runs(self) -> dict[str, dict[str, Any]]:
        done = self.cli("runs", "--json")
        assert done.returncode == 0, done.stderr
        return {r["id"]: r for r in json.loads(done.stdout)["runs"]}

    def rows(self, *runs: str) -> list[dict[str, Any]]:
        """These runs' rows of one `gpumon runs --json` (a poll of several runs costs one call, not one each)."""
        listed = self.runs()
        return [listed[run] for run in runs]

    def status(self, run: str) -> dict[str, Any]:
        try:
            return json.loads((self.home / "runs" / run / "status.json").read_text())
        except (OSError, ValueError):
            return {}

    def log(self, run: str) -> str:
        try:
            return (self.home / "runs" / run / "logs" / "rank0.log").read_text()
        except OSError:
            return ""

    def gpus_given(self, run: str) -> str | None:
        """The job's CVD line (``"CVD 1 PCI_BUS_ID"``) once it ends in a newline, else None: a log read while it is
        written can hold a line in part (a Python run without gpumon's line-buffering bootstrap writes it word by
        word, unbuffered)."""
        first, newline, _ = self.log(run).partition("\n")
        return first if newline and first.startswith("CVD ") else None

    def gpu(self, run: str) -> str | None:
        """The GPU index the job was given (its CUDA_VISIBLE_DEVICES), once its line is whole."""
        line = self.gpus_given(run)
        return line.split()[1] if line else None

    def keeper(self) -> int | None:
        return flock_holder(self.home / "queue" / "keeper.lock")

    def cleanup(self) -> None:
        """Every keeper, then every run's processes: SIGKILL, checked until none is left."""
        from gpumon.core.runs.record.store import RunStore
        from gpumon.core.runs.supervision.launcher import stop

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid = self.keeper() if (self.home / "queue").exists() else None
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            live = [r for r in RunStore(self.home).list() if r.live] if (self.home / "runs").exists() else []
            for record in live:
                with contextlib.suppress(OSError, PermissionError):
                    stop(record, kill=True)
            if not pid and not live:
                return
            time.sleep(0.2)
