"""What every row of `gpumon runs --json` must hold for its progress and pace, whatever the run: call these from
any test that reads rows (issue 48).

- ``check_progress(row)``: progress within 0..1 (or unknown, with a reason when a framework counts); no ETA once
  the run ended; a finished run whose total is known ends at 100% (the tests' scripts run to their total);
- ``check_pace(row, now)``: a live run with no step for T seconds has a pace of at most one step in T, by the
  row's own quiet; ``now`` (a time taken before the row was asked for) checks that against the row's last step
  once the row says the run is quiet (its events file then has nothing after that step).
"""

from __future__ import annotations

from typing import Any

from gpumon.core.runs.reading.progress import quiet_after
from gpumon.core.runs.record.values import metric_value

ENDED = ("finished", "failed", "stopped", "killed", "lost", "exited")


def _num(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    return None if value is None else metric_value(value)


def check_progress(row: dict[str, Any]) -> None:
    progress, eta, total = _num(row, "progress"), _num(row, "eta_s"), row.get("total_steps")
    where = f"{row.get('id')}: {row}"
    if progress is not None:
        assert 0.0 <= progress <= 1.0, where
        assert total, where  # a progress has a total it is taken against
    if eta is not None:
        assert eta >= 0.0 and row.get("status") not in ENDED, where
    position = row.get("position")
    if total and position is not None:
        assert 0 <= position <= total, where
    if row.get("status") == "finished" and total:
        assert progress == 1.0, where


def check_pace(row: dict[str, Any], now: float | None = None, slack_s: float = 0.5) -> None:
    step_time, quiet = _num(row, "step_time_s"), _num(row, "quiet_s")
    where = f"{row.get('id')}: {row}"
    if step_time is None:
        return
    assert step_time > 0, where
    if row.get("status") in ENDED:
        assert quiet is None, where  # an ended run has no quiet: its pace is its last two minutes'
        return
    if quiet is not None and quiet > 0:
        assert step_time >= quiet * (1 - 1e-9), where  # no step for T s: at most one step in T
    last = _num(row, "last_step_t")
    if now is not None and last is not None and quiet is not None and quiet > quiet_after(_num(row, "median_step_s")):
        assert step_time >= now - last - slack_s, where  # the quiet as the run's own last step dates it
