"""One state dir with something in every view: three ended runs, an ended experiment, alerts of each status.

Fixed times throughout, so the views' snapshots never depend on the clock (the tests set TZ=UTC).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.test_runs_view import FAILED, FINISHED, STOPPED, T0, record_runs
from tests.trials_data import record_done

FAILED_TEXT = (
    "failed: the script exited with status 1: RuntimeError: CUDA error: device-side assert triggered. "
    "Fix: run it with CUDA_LAUNCH_BLOCKING=1 to see the kernel that asserted; its last lines say why: "
    f"gpumon logs {FAILED}"
)


def _alerts(home: Path, run: str, docs: list[dict[str, Any]]) -> None:
    with (home / "runs" / run / "alerts.jsonl").open("a") as f:
        for doc in docs:
            f.write(json.dumps(doc) + "\n")


def record_alerts(home: Path) -> None:
    """Alerts on the recorded runs: one sent nowhere, one sent, one failed, one held."""
    _alerts(home, FAILED, [
        {"type": "alert", "id": "a1", "kind": "failed", "text": FAILED_TEXT, "t": T0 + 943, "run": FAILED,
         "state": "failed", "host": "trainbox", "channels": []},
    ])  # fmt: skip
    _alerts(home, FINISHED, [
        {"type": "alert", "id": "a2", "kind": "leak", "t": T0 + 120, "run": FINISHED, "state": "running",
         "host": "trainbox", "channels": ["slack"],
         "text": "leak: rank 1's host memory grows 7.8 kB per step (r²=1.00); at this pace it runs out in 4 h 10 min"},
        {"type": "attempt", "id": "a2", "channel": "slack", "try": 1, "ok": True, "t": T0 + 121, "final": True},
        {"type": "alert", "id": "a3", "kind": "finished", "t": T0 + 186, "run": FINISHED, "state": "finished",
         "host": "trainbox", "channels": ["https://hooks.example.com/…"], "text": "finished in 3 min 5 s"},
        {"type": "attempt", "id": "a3", "channel": "https://hooks.example.com/…", "try": 3, "ok": False,
         "reason": "HTTP 503", "t": T0 + 200, "final": True},
    ])  # fmt: skip
    _alerts(home, STOPPED, [
        {"type": "alert", "id": "a4", "kind": "stalled", "t": T0 + 1300, "run": STOPPED, "state": "running",
         "host": "trainbox", "channels": ["slack"], "held": "one stalled alert per run every 30 min",
         "text": "stalled: no step for 10 min (the last took 0.4 s)"},
    ])  # fmt: skip
    (home / "alerts-read").write_text(str(T0 + 200))


def record_everything(home: Path) -> None:
    record_runs(home, live=False)
    record_done(home)
    record_alerts(home)
