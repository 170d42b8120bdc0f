"""The GPU process table, updated by diff so the cursor and scroll stay put.

COMMAND takes the width the other columns leave (cut with "…" only when it is
longer); too narrow for every column, OWNER, RUN, SM% and USER go in that order and
the title names them. OWNER (a process's pod, container or Slurm job: core/owners.py) shows only while
some process listed has one. ``/`` filters by words, ``p`` shows each process under
its parents (process_tree.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import Any

from rich.text import Text
from textual.events import Resize
from textual.widgets import DataTable

from gpumon.core.format import NA, elide, num, size
from gpumon.core.model import GpuDevice, GpuProcess
from gpumon.core.owners import owner_text
from gpumon.tui.widgets.keyed_table import Column, RowTable, SortCell, fit_columns, hidden_note, title_room
from gpumon.tui.widgets.process_tree import TreeRow, tree_rows
from gpumon.tui.widgets.render import short_run_id

COMMAND_MIN = 12
COLUMNS: tuple[Column, ...] = (
    ("gpu", "GPU", 3),
    ("pid", "PID", 8),
    ("user", "USER", 10),
    ("owner", "OWNER", 24),
    ("mem", "GPU MEM", 10),
    ("sm", "SM%", 4),
    ("run", "RUN", 11),
    ("command", "COMMAND", 10_000),  # the room left
)
DROP = ("owner", "run", "sm", "user")  # left out in this order when the terminal is too narrow for every column
SORT_KEYS = ("mem", "sm", "pid", "user", "owner", "gpu", "command", "run")
_NUMERIC = {"gpu", "pid", "mem", "sm"}


def _right(value: str, style: str = "") -> Text:
    return Text(value, style=style, justify="right")


def _cells(
    p: GpuProcess, command_width: int, run: str | None = None, label: str = "", prefix: str = ""
) -> dict[str, SortCell]:
    user = p.user or NA
    owner = owner_text(p)
    return {
        "gpu": SortCell(p.gpu_index, _right(str(p.gpu_index))),
        "pid": SortCell(p.pid, _right(str(p.pid))),
        "user": SortCell(user, Text(elide(user, 10), style="dim" if p.user is None else "")),
        "owner": SortCell(owner, Text(elide(owner, 24))),
        "mem": SortCell(p.used_memory if p.used_memory is not None else -1, _right(size(p.used_memory))),
        "sm": SortCell(p.sm_util if p.sm_util is not None else -1, _right(num(p.sm_util))),
        "run": SortCell(
            run or "", Text(label, style="bold black on yellow" if label.startswith(IDLE) else "bold cyan")
        ),
        "command": SortCell(
            p.command or "", Text.assemble((prefix, "dim"), elide(p.command, command_width - len(prefix)))
        ),
    }


def _parent_cells(row: TreeRow, command_width: int) -> dict[str, SortCell]:
    """A parent process in the tree: its PID and command, dim; it uses no GPU."""
    blank = SortCell("", Text(""))
    return {
        "gpu": blank,
        "pid": SortCell(row.pid, _right(str(row.pid), "dim")),
        "user": blank,
        "owner": blank,
        "mem": blank,
        "sm": blank,
        "run": blank,
        "command": SortCell(row.command, Text(row.prefix + elide(row.command, command_width - len(row.prefix)), "dim")),
    }


IDLE = "⏸"  # a run's process holding this GPU while it does nothing (core/gpu/idle.py)


def _run_label(run: str | None, rank: int | None, idle: bool = False) -> str:
    """'ddp-c132 r1' for rank 1 of a run; the run alone for its torchrun or supervisor process; '⏸' first while
    it holds its GPU idle."""
    if not run:
        return ""
    return (IDLE if idle else "") + short_run_id(run) + (f" r{rank}" if rank is not None else "")


def matches(p: GpuProcess, words: list[str]) -> bool:
    """Every word in the process's PID, user, owner (pod, namespace, container name or id, Slurm job) or command
    (case-insensitive)."""
    owners = (p.pod, p.namespace, p.container_name, p.container_id, p.container_runtime, p.slurm_job)
    text = f"{p.pid} {p.user or ''} {owner_text(p)} {' '.join(filter(None, owners))} {p.command or ''}".lower()
    return all(word in text for word in words)


class ProcessTable(RowTable):
    """Processes of the selected GPU (or of all GPUs), sortable by any column."""

    def __init__(self) -> None:
        super().__init__(id="processes", cursor_type="row", zebra_stripes=False)
        self.sort_key = "mem"
        self.sort_reverse = True
        self.show_all = False
        self.tree_mode = False
        self.filter_text = ""  # the filter's words
        self._reselect: str | None = None  # the row to select again after a rebuild
        self.gpu_index: int | None = None
        self.processes: dict[str, GpuProcess] = {}
        self.labels: dict[str, str] = {}  # row key -> what its RUN cell says
        self.column_set: tuple[Column, ...] = ()
        self.hidden: tuple[str, ...] = ()
        self._tree_keys: list[str] = []
        self._last: tuple[tuple[GpuDevice, ...], int | None, dict[int, str], dict[int, int]] = ((), None, {}, {})
        self.border_title = "processes"

    # -- columns ---------------------------------------------------------------
    def _fit(self, owners: bool = False) -> None:
        """Columns for the current width (OWNER while ``owners``); a change rebuilds the table (a resize, or the
        first process with an owner, never a plain tick)."""
        room = (self.content_size.width or 80) - self.styles.scrollbar_size_vertical
        wanted = COLUMNS if owners else tuple(c for c in COLUMNS if c[0] != "owner")
        columns, hidden = fit_columns(wanted, room, "command", COMMAND_MIN, DROP)
        if columns == self.column_set:
            return
        selected = self.selected_key()
        self.clear(columns=True)
        for key, label, width in columns:
            self.add_column(label, key=key, width=width)
        self.column_set, self.hidden = columns, hidden
        self.processes, self._tree_keys = {}, []
        if self.sort_key not in {c[0] for c in columns}:
            self.sort_key, self.sort_reverse = "mem", True
        self._reselect = selected

    def _command_width(self) -> int:
        return next((w for key, _, w in self.column_set if key == "command"), COMMAND_MIN)

    def on_resize(self, event: Resize) -> None:
        if self.column_set:  # back at its size (its view shown again): as drawn
            self.show(*self._last)

    # -- showing ---------------------------------------------------------------
    def show(
        self,
        devices: tuple[GpuDevice, ...],
        gpu_index: int | None,
        run_pids: dict[int, str] | None = None,
        ranks: dict[int, int] | None = None,
        idle: Collection[int] = (),
    ) -> None:
        """Show the processes of ``gpu_index`` (or all); ``run_pids`` marks those of gpumon runs (``ranks``: their
        rank processes)."""
        run_pids, ranks = run_pids or {}, ranks or {}
        self._last = (devices, gpu_index, run_pids, ranks)
        self._reselect = None
        scoped = [p for d in devices if self.show_all or d.index == gpu_index for p in d.processes]
        self._fit(any(p.container_id or p.pod_uid or p.slurm_job for p in scoped))
        self.gpu_index = gpu_index
        words = self.filter_text.lower().split()
        wanted = {f"{p.gpu_index}:{p.pid}": p for p in scoped if matches(p, words)}
        labels = {key: _run_label(run_pids.get(p.pid), ranks.get(p.pid), p.pid in idle) for key, p in wanted.items()}
        if self.tree_mode:
            self._show_tree(wanted, labels, run_pids)
        else:
            self._show_flat(wanted, labels, run_pids)
        self.processes, self.labels = wanted, labels
        if self._reselect is not None:
            self.select_key(self._reselect)
        self._titles(len(scoped))

    def _show_flat(self, wanted: dict[str, GpuProcess], labels: dict[str, str], run_pids: dict[int, str]) -> None:
        if self._tree_keys:  # from the tree: its parent rows go
            self.clear()
            self._tree_keys, self.processes = [], {}
        width = self._command_width()
        changed = False
        for key in [k for k in self.processes if k not in wanted]:
            self.remove_row(key)
            changed = True
        for key, proc in wanted.items():
            old = self.processes.get(key)
            if old is not None and old == proc and self.labels.get(key) == labels[key]:
                continue  # the row as drawn: its cells are not even built (an idle GPU's processes read the same)
            cells = _cells(proc, width, run_pids.get(proc.pid), labels[key])
            if old is None:
                self.add_row(*(cells[c] for c, _, _ in self.column_set), key=key)
                changed = True
            else:
                changed = self._update(key, cells) or changed
        if changed:
            self.apply_sort()

    def _show_tree(self, wanted: dict[str, GpuProcess], labels: dict[str, str], run_pids: dict[int, str]) -> None:
        """Rows in tree order: rebuilt when the order changes, else changed cell by cell."""
        width = self._command_width()
        ordered = sorted(wanted.values(), key=lambda p: self._sort_value(_cells(p, width)), reverse=self.sort_reverse)
        rows = tree_rows(ordered)
        keys = [row.key for row in rows]
        rebuild = keys != self._tree_keys
        if rebuild:
            self._reselect = self._reselect or self.selected_key()
            self.clear()
        for row in rows:
            if row.proc is None:
                cells = _parent_cells(row, width)
            else:
                cells = _cells(row.proc, width, run_pids.get(row.pid), labels[row.key], row.prefix)
            if rebuild:
                self.add_row(*(cells[c] for c, _, _ in self.column_set), key=row.key)
            else:
                self._update(row.key, cells)
        self._tree_keys = keys
        self._set_subtitle()

    def _update(self, key: str, cells: dict[str, SortCell]) -> bool:
        """Changes the cells that differ; True when the sort column did."""
        changed = {c: cells[c] for c, _, _ in self.column_set if self.get_cell(key, c) != cells[c]}
        if changed:
            self.update_cells(key, changed)  # the row repainted once, however many of its cells moved
        return self.sort_key in changed

    def _sort_value(self, cells: dict[str, SortCell]) -> Any:
        return cells[self.sort_key].key

    def _titles(self, scoped: int) -> None:
        scope = "all GPUs" if self.show_all else f"GPU {self.gpu_index}" if self.gpu_index is not None else "no GPU"
        title = f"processes · {scope} · {scoped}"
        if self.filter_text:
            title = f"processes · {scope} · filter '{self.filter_text}': {len(self.processes)} of {scoped}"
        title += hidden_note(self.hidden, title_room(self, title))
        if title != self.border_title:  # each assignment repaints the border
            self.border_title = title

    def _set_subtitle(self) -> None:
        subtitle = f"{'tree · ' if self.tree_mode else ''}sort {self.sort_key} {'↓' if self.sort_reverse else '↑'}"
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle

    # -- sorting ---------------------------------------------------------------
    def apply_sort(self) -> None:
        if self.tree_mode:
            self.show(*self._last)  # the tree orders siblings by the sort
            return
        if self.sort_key in self.columns:
            column = self.get_column_index(self.sort_key)
            current = [row.key for row in self.ordered_rows]
            keyed = sorted(current, key=lambda r: self.get_row(r)[column].key, reverse=self.sort_reverse)
            if keyed != current:  # sorting repaints the whole table: only when the order changes
                self.sort(self.sort_key, key=lambda cell: cell.key, reverse=self.sort_reverse)
        self._set_subtitle()

    def sort_by(self, key: str) -> None:
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key = key
            self.sort_reverse = key in _NUMERIC
        self.apply_sort()

    def cycle_sort(self) -> None:
        shown = [k for k in SORT_KEYS if k in self.columns] or list(SORT_KEYS)
        self.sort_key = shown[(shown.index(self.sort_key) + 1) % len(shown)] if self.sort_key in shown else shown[0]
        self.sort_reverse = self.sort_key in _NUMERIC  # biggest first for numbers
        self.apply_sort()

    def step_sort(self, step: int) -> None:
        """Sort by the column left (-1) or right (1) of the sort column, as htop's and nvitop's < and >."""
        keys = [key for key, _, _ in self.column_set] or [key for key, _, _ in COLUMNS]
        position = keys.index(self.sort_key) if self.sort_key in keys else 0
        self.sort_key = keys[(position + step) % len(keys)]
        self.sort_reverse = self.sort_key in _NUMERIC
        self.apply_sort()

    def reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.apply_sort()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    # -- filter and tree -------------------------------------------------------
    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()
        self.show(*self._last)

    def toggle_tree(self) -> None:
        self.tree_mode = not self.tree_mode
        selected = self.selected_key()
        self.show(*self._last)
        if selected is not None:
            self.select_key(selected)

    # -- selection -------------------------------------------------------------
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:  # noqa: BLE001 - cursor outside the rows
            return None

    def select_key(self, key: str) -> None:
        with contextlib.suppress(Exception):  # no such row (filtered out)
            self.move_cursor(row=self.get_row_index(key), animate=False)

    def find(self, words: list[str], after: bool) -> bool:
        """Move to the first row from the top (``after``: below the cursor, wrapping) whose process matches
        ``words``, as htop's search does; False when none does."""
        if not words or not self.row_count:
            return False
        start = self.cursor_row + 1 if after else 0
        for offset in range(self.row_count):
            row = (start + offset) % self.row_count
            key = self.ordered_rows[row].key.value
            proc = self.processes.get(str(key))
            if proc is not None and matches(proc, words):
                self.move_cursor(row=row, animate=False)
                return True
        return False

    def selected(self) -> GpuProcess | None:
        """The selected GPU process; None on a parent row of the tree."""
        key = self.selected_key()
        return self.processes.get(key) if key is not None else None
