"""The trial table: one row per trial, keyed by trial id, updated by diff (add_row, update_cell, remove_row).

Columns: trial, status, the searched parameters, iteration, the latest
metrics (the experiment's first, as many as fit), the trial's best value (★
on the experiment's best trial), elapsed (Tune's time_total_s) and the GPU
memory of the trial's process. Column widths are fixed when the column set
changes (another experiment, a new parameter or metric, another terminal
width) or the status filter does: the only times the table is rebuilt.
Rows whose snapshot object did not change are skipped, so a refresh costs
what the changed trials cost.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from gpumon.core.runs.reading.experiments import ExperimentSnapshot, TrialRow
from gpumon.tui.views.trials.trial_cells import BIGGEST_FIRST, FILTERS, MISSING, trial_cells, trial_columns
from gpumon.tui.widgets.keyed_table import Column, KeyedTable, SortCell, hidden_note, title_room
from gpumon.tui.widgets.literal import set_title


class TrialTable(KeyedTable):
    """The selected experiment's trials, sortable by any column, filtered by status."""

    def __init__(self) -> None:
        super().__init__(id="trial-table", cursor_type="row", zebra_stripes=False)
        self.snapshot: ExperimentSnapshot | None = None
        self.column_set: tuple[Column, ...] = ()
        self.hidden: tuple[str, ...] = ()  # headers of the columns the width leaves out
        self.sort_key = "id"
        self.sort_reverse = False
        self.status_filter: str | None = None
        self._gpu: dict[str, int] = {}
        self._shown: dict[str, tuple[TrialRow, int | None, bool, dict[str, SortCell]]] = {}
        self.border_title = "trials"

    # -- showing --------------------------------------------------------------
    def show(self, snap: ExperimentSnapshot, gpu: dict[str, int], width: int) -> None:
        """Show ``snap``; ``gpu`` maps trial ids to GPU memory. Rebuilds only when the columns change."""
        columns, self.hidden = trial_columns(snap, width)
        same_run = self.snapshot is not None and self.snapshot.info.run_id == snap.info.run_id
        self.snapshot, self._gpu = snap, gpu
        if not same_run or columns != self.column_set:
            if not same_run:
                self.status_filter = None
            self._rebuild(columns)
        else:
            self._apply()

    def _rebuild(self, columns: tuple[Column, ...]) -> None:
        selected = self.selected_id()
        self.clear(columns=True)
        for key, label, width in columns:
            self.add_column(Text(label), key=key, width=width)
        self.column_set, self._shown = columns, {}
        if self.sort_key not in {c[0] for c in columns}:
            self.sort_key, self.sort_reverse = "id", False
        self._apply(force_sort=True, keep=selected)

    def _apply(self, force_sort: bool = False, keep: str | None = None) -> None:
        snap = self.snapshot
        assert snap is not None
        selected = keep or self.selected_id()
        best_id, wanted = snap.info.best_id, self.status_filter
        resort = force_sort
        for row in snap.trials:
            old = self._shown.get(row.id)
            if wanted is not None and row.status != wanted:
                if old is not None:
                    self.remove_row(row.id)
                    del self._shown[row.id]
                continue
            gpu = self._gpu.get(row.id)
            best = row.id == best_id
            if old is not None and old[0] is row and old[1] == gpu and old[2] == best:
                continue  # unchanged: the common case for most of a big experiment
            cells = trial_cells(row, self.column_set, best, gpu)
            if old is None:
                self.add_row(*(cells[key] for key, _, _ in self.column_set), key=row.id)
                resort = True
            else:
                for key, cell in cells.items():
                    if old[3][key] != cell:
                        self.update_cell(row.id, key, cell)
                        resort = resort or key == self.sort_key
            self._shown[row.id] = (row, gpu, best, cells)
        for gone in [key for key in self._shown if key not in snap.by_id]:
            self.remove_row(gone)
            del self._shown[gone]
        if resort:
            self.sort(self.sort_key, "id", key=self._order, reverse=self.sort_reverse)
        if selected in self._shown and self.selected_id() != selected:
            self.select_trial(selected)
        self._titles()

    def _titles(self) -> None:
        total = len(self.snapshot.trials) if self.snapshot else 0
        title = f"trials · {len(self._shown)} of {total} {self.status_filter}" if self.status_filter else ""
        title = title or f"trials · {total}"
        title += hidden_note(self.hidden, title_room(self, title))
        label = next((label for key, label, _ in self.column_set if key == self.sort_key), self.sort_key)
        subtitle = f"sort {label} {'↓' if self.sort_reverse else '↑'}"
        if self.status_filter:
            subtitle += f" · filter {self.status_filter}"
        if title != self.border_title:  # each assignment repaints the border
            self.border_title = title
        set_title(self, subtitle, subtitle=True)  # a parameter's name is the user's

    # -- sorting and filtering ------------------------------------------------
    def _order(self, cells: tuple[SortCell, SortCell]) -> tuple[bool, Any, str]:
        """The sort column's key, the trial id to break ties; rows without a value last either way."""
        key = cells[0].key
        missing = isinstance(key, tuple) and key[0] == MISSING
        return (missing != self.sort_reverse, key, cells[1].key)

    def _biggest_first(self, key: str) -> bool:
        metric = self.snapshot.info.metric if self.snapshot else None
        if key == "best" or key == f"m:{metric}":
            return bool(self.snapshot and self.snapshot.info.mode == "max")
        return key in BIGGEST_FIRST or key.startswith("m:")

    def sort_by(self, key: str) -> None:
        """Sort by a column; the same column again reverses the order."""
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key, self.sort_reverse = key, self._biggest_first(key)
        if self.snapshot is not None:
            self._apply(force_sort=True)

    def cycle_sort(self) -> None:
        self.step_sort(1)

    def step_sort(self, step: int) -> None:
        """Sort by the column right (1) or left (-1) of the sort column (s and >, <), as in htop and nvitop."""
        keys = [key for key, _, _ in self.column_set] or ["id"]
        position = keys.index(self.sort_key) if self.sort_key in keys else -1
        key = keys[(position + step) % len(keys)]
        self.sort_key, self.sort_reverse = key, self._biggest_first(key)
        if self.snapshot is not None:
            self._apply(force_sort=True)

    def reverse_sort(self) -> None:
        self.sort_by(self.sort_key)

    def filters(self) -> list[str | None]:
        present = {row.status for row in self.snapshot.trials} if self.snapshot else set()
        return [None, *(s for s in FILTERS if s in present or s == self.status_filter)]

    def cycle_filter(self) -> str | None:
        """All trials, then each status some trial has; rebuilds the rows (a user's action, not a tick)."""
        options = self.filters()
        position = options.index(self.status_filter) if self.status_filter in options else 0
        self.set_filter(options[(position + 1) % len(options)])
        return self.status_filter

    def set_filter(self, status: str | None) -> None:
        self.status_filter = status
        if self.snapshot is not None:
            self._rebuild(self.column_set)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    # -- selection ------------------------------------------------------------
    def select_trial(self, trial_id: str) -> bool:
        return self.select_key(trial_id)  # False when filtered out or not shown yet

    def row_keys(self) -> list[str]:
        return [str(row.key.value) for row in self.ordered_rows]
