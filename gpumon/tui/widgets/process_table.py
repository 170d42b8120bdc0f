"""The GPU process table, updated by diff so the cursor and scroll stay put."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from gpumon.core.format import NA, elide, num, size
from gpumon.core.model import GpuDevice, GpuProcess
from gpumon.tui.widgets.keyed_table import SortCell
from gpumon.tui.widgets.render import short_run_id

# column key, header, width (None: the command column takes the room left)
COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("gpu", "GPU", 3),
    ("pid", "PID", 8),
    ("user", "USER", 10),
    ("mem", "GPU MEM", 10),
    ("sm", "SM%", 4),
    ("run", "RUN", 11),
    ("command", "COMMAND", None),
)
SORT_KEYS = ("mem", "sm", "pid", "user", "gpu", "command", "run")
_NUMERIC = {"gpu", "pid", "mem", "sm"}


def _cells(p: GpuProcess, command_width: int, run: str | None = None, label: str = "") -> dict[str, SortCell]:
    def right(value: str) -> Text:
        return Text(value, justify="right")

    user = p.user or NA
    return {
        "gpu": SortCell(p.gpu_index, right(str(p.gpu_index))),
        "pid": SortCell(p.pid, right(str(p.pid))),
        "user": SortCell(user, Text(elide(user, 10), style="dim" if p.user is None else "")),
        "mem": SortCell(p.used_memory if p.used_memory is not None else -1, right(size(p.used_memory))),
        "sm": SortCell(p.sm_util if p.sm_util is not None else -1, right(num(p.sm_util))),
        "run": SortCell(run or "", Text(label, style="bold cyan")),
        "command": SortCell(p.command or "", Text(elide(p.command, command_width))),
    }


def _run_label(run: str | None, rank: int | None) -> str:
    """'ddp-c132 r1' for rank 1 of a run; the run alone for its torchrun or supervisor process."""
    if not run:
        return ""
    return short_run_id(run) + (f" r{rank}" if rank is not None else "")


class ProcessTable(DataTable[SortCell]):
    """Processes of the selected GPU (or of all GPUs), sortable by any column."""

    def __init__(self) -> None:
        super().__init__(id="processes", cursor_type="row", zebra_stripes=False)
        self.sort_key = "mem"
        self.sort_reverse = True
        self.show_all = False
        self.gpu_index: int | None = None
        self.processes: dict[str, GpuProcess] = {}
        self.labels: dict[str, str] = {}  # row key -> what its RUN cell says
        self._command_chars = 0
        self.border_title = "processes"

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def _command_width(self) -> int:
        fixed = sum(w for _, _, w in COLUMNS if w) + 2 * len(COLUMNS)  # cell padding
        return max(16, (self.content_size.width or 80) - fixed - 3)  # room for a scrollbar

    def show(
        self,
        devices: tuple[GpuDevice, ...],
        gpu_index: int | None,
        run_pids: dict[int, str] | None = None,
        ranks: dict[int, int] | None = None,
    ) -> None:
        """Show the processes of ``gpu_index`` (or all); ``run_pids`` marks those of gpumon runs (``ranks``: their
        rank processes)."""
        self.gpu_index = gpu_index
        run_pids, ranks = run_pids or {}, ranks or {}
        wanted = {
            f"{p.gpu_index}:{p.pid}": p for d in devices if self.show_all or d.index == gpu_index for p in d.processes
        }
        width = self._command_width()
        resized, self._command_chars = width != self._command_chars, width
        changed = False
        for key in [k for k in self.processes if k not in wanted]:
            self.remove_row(key)
            changed = True
        labels = {key: _run_label(run_pids.get(p.pid), ranks.get(p.pid)) for key, p in wanted.items()}
        for key, proc in wanted.items():
            cells = _cells(proc, width, run_pids.get(proc.pid), labels[key])
            old = self.processes.get(key)
            if old is None:
                self.add_row(*(cells[c] for c, _, _ in COLUMNS), key=key)
                changed = True
            elif old != proc or resized or self.labels.get(key) != labels[key]:
                for column, cell in cells.items():
                    if self.get_cell(key, column) != cell:
                        self.update_cell(key, column, cell)
                        changed = changed or column == self.sort_key
        self.processes = wanted
        self.labels = labels
        scope = "all GPUs" if self.show_all else f"GPU {gpu_index}" if gpu_index is not None else "no GPU"
        title = f"processes · {scope} · {len(wanted)}"
        if title != self.border_title:  # each assignment repaints the border
            self.border_title = title
        if changed:
            self.apply_sort()

    def apply_sort(self) -> None:
        column = self.get_column_index(self.sort_key)
        current = [row.key for row in self.ordered_rows]
        keyed = sorted(current, key=lambda r: self.get_row(r)[column].key, reverse=self.sort_reverse)
        if keyed != current:  # sorting repaints the whole table: only when the order changes
            self.sort(self.sort_key, key=lambda cell: cell.key, reverse=self.sort_reverse)
        subtitle = f"sort {self.sort_key} {'↓' if self.sort_reverse else '↑'}"
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle

    def sort_by(self, key: str) -> None:
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key = key
            self.sort_reverse = key in _NUMERIC
        self.apply_sort()

    def cycle_sort(self) -> None:
        self.sort_key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]
        self.sort_reverse = self.sort_key in _NUMERIC  # biggest first for numbers
        self.apply_sort()

    def reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.apply_sort()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    def selected(self) -> GpuProcess | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # noqa: BLE001 - cursor outside the rows
            return None
        return self.processes.get(str(key))
