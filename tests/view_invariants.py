"""One run, every view: ``gpumon runs --json``, the Runs view's row, serve's /api and /metrics document and the
doctor say the same figures of the same run, and those figures obey what any run's must (issue 48).

``check_home(home)`` is called on every state dir a test leaves behind (tests/conftest.py, at each test's end),
so every run the tests make is checked, whatever the test looked at. It reads each run as the views read it (one
``RunsMonitor``), never by hand, and fails naming the run, the figure and each view's value.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# The figures each view shows of a run: runs --json's key, serve's key (the page, /api and /metrics).
SHARED = (
    "step",
    "loss",
    "loss_source",
    "samples_per_s",
    "progress",
    "total_steps",
    "eta_s",
    "step_time_s",
    "median_step_s",
    "memory_bytes",
    "mfu",
    "mfu_reason",
    "tokens_per_s",
    "flops_per_step",
    "achieved_flops_per_s",
    "flops_dtype",
    "flops_shape",
    "position",
    "progress_why",
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and a in ("nan", "inf", "-inf"):  # runs --json writes non-finite numbers as strings
        a = float(a)
    if isinstance(b, str) and b in ("nan", "inf", "-inf"):
        b = float(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def run_figures(summary: Any) -> list[str]:
    """What is wrong with one run as the views show it: an empty list when nothing is."""
    from gpumon.core.runs.record.listing import run_doc as json_row
    from gpumon.serve.runs_view import run_doc as served
    from gpumon.tui.views.runs.run_table import run_cells
    from tests.invariants import check_pace, check_progress

    sid = summary.id
    row, page = json_row(summary), served(summary, "host", {}, series=False)
    wrong = [
        f"{sid}: {key} is {row.get(key)!r} in `gpumon runs --json` but {page.get(key)!r} on serve's page"
        for key in SHARED
        if not _same(row.get(key), page.get(key))
    ]
    cells = run_cells(summary, 24)
    shown = {
        "step": (cells["step"].key, -1 if row["step"] is None else row["step"]),
        "progress": (cells["progress"].key, -1.0 if row["progress"] is None else row["progress"]),
        "speed": (cells["speed"].key, 1 / row["step_time_s"] if row["step_time_s"] else 0.0),
    }
    wrong += [
        f"{sid}: the Runs view sorts {key} by {a!r}, runs --json has {b!r}" for key, (a, b) in shown.items() if a != b
    ]
    for check in (check_progress, check_pace):  # progress in 0..1, 100% at a finished run's end, pace <= 1/quiet
        try:
            check(row)
        except AssertionError:
            keys = ("status", "step", "progress", "total_steps", "position", "eta_s", "step_time_s", "quiet_s")
            wrong.append(f"{sid}: {check.__name__} fails on { ({k: row.get(k) for k in keys}) }")
    return wrong


def doctor_figures(summary: Any) -> list[str]:
    """An ended run's doctor (``gpumon doctor --json``) against its row: the same pace (its step time)."""
    from gpumon.core.doctor.report import diagnose
    from gpumon.core.runs.record.listing import run_doc as json_row

    if summary.record.live:
        return []  # a live run's figures move between two reads
    doctor, row = diagnose(summary.record).to_dict(), json_row(summary)
    a, b = doctor["step_time_s"], row["step_time_s"]
    if (a is None) != (b is None) or (a is not None and not math.isclose(a, b, rel_tol=1e-6)):
        return [f"{summary.id}: the doctor's pace is a step in {a!r} s, `gpumon runs --json` says {b!r} s"]
    return []


def check_home(home: Path) -> list[str]:
    """Every run of the state dir ``home`` that ranks reported into (a run written by hand has no ``events/``)."""
    from gpumon.core.runs.reading.monitor import RunsMonitor
    from gpumon.core.runs.record.store import RunStore

    wrong: list[str] = []
    for summary in RunsMonitor(RunStore(home)).refresh():
        if not (summary.record.dir / "events").is_dir():
            continue
        wrong += run_figures(summary) + doctor_figures(summary)
    return wrong


def homes_under(root: Path) -> list[Path]:
    """The state dirs up to three folders below ``root`` (as tests/conftest.py's ``stop_runs_under`` finds them)."""
    found = {
        spec.parent.parent.parent
        for depth in ("", "*/", "*/*/", "*/*/*/")
        for spec in root.glob(f"{depth}runs/*/spec.json")
    }
    return sorted(found)
