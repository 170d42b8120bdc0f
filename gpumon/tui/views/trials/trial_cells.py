"""The trial table's columns and cells: what each column shows of a trial and the key it sorts by."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from gpumon.core.format import duration, elide, size
from gpumon.core.format import value as value_text
from gpumon.core.model import Snapshot
from gpumon.core.runs.reading.experiments import ExperimentSnapshot, TrialRow
from gpumon.tui.widgets.keyed_table import Column, SortCell, fit_columns
from gpumon.tui.widgets.render import number

ID_MIN = 12  # a trial id shorter than this is never cut
STATUS_STYLE = {
    "RUNNING": "bold green",
    "STOPPING": "yellow",
    "PENDING": "yellow",
    "PAUSED": "blue",
    "TERMINATED": "dim",
    "ERROR": "bold red",
    "LOST": "dim",
    "STOPPED": "yellow",
}
STATUS_ORDER = ("RUNNING", "STOPPING", "PENDING", "PAUSED", "ERROR", "TERMINATED", "STOPPED", "LOST")
FILTERS = ("RUNNING", "PENDING", "PAUSED", "ERROR", "TERMINATED", "STOPPED", "LOST")
NONE = "–"  # no value: no GPU, no matching process
FIXED_TAIL: tuple[Column, ...] = (("best", "BEST", 11), ("time", "TIME", 7), ("gpu", "GPU MEM", 9))
BIGGEST_FIRST = {"iter", "time", "gpu"}  # numbers that read best biggest first
MISSING = 2  # sort_key's group of an empty cell


def sort_key(value: Any) -> tuple[int, float, str]:
    """Numbers before text before nothing, comparable whatever the types (a choice may mix them)."""
    if value is None:
        return (MISSING, 0.0, "")
    if isinstance(value, int | float):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def gpu_memory(snapshot: Snapshot | None) -> dict[int, int]:
    """PID -> GPU memory in bytes, summed over the GPUs a process uses."""
    out: dict[int, int] = {}
    for dev in snapshot.gpu.devices if snapshot is not None else ():
        for proc in dev.processes:
            if proc.used_memory is not None:
                out[proc.pid] = out.get(proc.pid, 0) + proc.used_memory
    return out


def shown_status(row: TrialRow) -> str:
    return "STOPPING" if row.stopping else row.status


def trial_columns(snap: ExperimentSnapshot, width: int) -> tuple[tuple[Column, ...], tuple[str, ...]]:
    """The columns for ``width`` terminal columns, and the headers of those that do not fit: every parameter,
    then the metrics (the experiment's first always; the others while they fit, else named as hidden), BEST, TIME
    and GPU MEM; what does not fit is named as hidden.
    TRIAL takes the room left up to its longest id, cut with "…" below that."""
    sample = snap.trials[:50]
    id_width = min(24, max([8, *(len(r.id) for r in sample)]))
    columns: list[Column] = [("id", "TRIAL", id_width), ("status", "STATUS", 10)]
    for name in snap.params:
        widest = max([len(name), *(len(value_text(r.params.get(name))) for r in sample)])
        columns.append((f"p:{name}", name, min(14, max(5, widest))))
    columns.append(("iter", "ITER", 5))
    metrics = [(f"m:{name}", name, min(12, max(8, len(name)))) for name in snap.metrics]
    # the last metric goes first, then GPU MEM, TIME and BEST, then the parameters, the last first: a narrow
    # terminal hides columns (named in the title) rather than cut the table at its edge
    params = [key for key, _, _ in columns if key.startswith("p:")]
    drop = (*(key for key, _, _ in reversed(metrics[1:])), "gpu", "time", "best", *reversed(params))
    room = width - 3  # the border and the scrollbar
    return fit_columns((*columns, *metrics, *FIXED_TAIL), room, "id", ID_MIN, drop)


def trial_cells(row: TrialRow, columns: tuple[Column, ...], best: bool, gpu: int | None) -> dict[str, SortCell]:
    def right(value: str, style: str = "") -> Text:
        return Text(value, style=style, justify="right")

    cells: dict[str, SortCell] = {}
    for key, _, width in columns:
        if key == "id":
            cell = SortCell(row.id, Text(elide(row.id, width), style="bold" if best else ""))
        elif key == "status":
            status = shown_status(row)
            cell = SortCell(STATUS_ORDER.index(status), Text(status, style=STATUS_STYLE.get(status, "")))
        elif key.startswith("p:"):
            value = row.params.get(key[2:])
            cell = SortCell(sort_key(value), right(elide(value_text(value), width)))
        elif key == "iter":
            cell = SortCell(sort_key(row.iteration), right(value_text(row.iteration)))
        elif key.startswith("m:"):
            metric = row.metrics.get(key[2:])
            cell = SortCell(sort_key(metric), right(number(metric)))
        elif key == "best":
            mark = " ★" if best else "  "
            style = "bold yellow" if best else ""
            cell = SortCell(sort_key(row.best), right(number(row.best) + mark if row.best is not None else "", style))
        elif key == "time":
            elapsed = row.time_total_s
            cell = SortCell(sort_key(elapsed), right(duration(elapsed) if elapsed is not None else ""))
        else:  # gpu
            cell = SortCell(sort_key(gpu), right(size(gpu) if gpu is not None else NONE, "" if gpu else "dim"))
        cells[key] = cell
    return cells
