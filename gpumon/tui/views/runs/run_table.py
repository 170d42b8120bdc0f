"""The run list: one row per run, newest on top, updated by diff (rows keyed by run id).

The columns follow the terminal's width: full ids, kind and program when they
fit, else short ids ("ddp-c132") and the numbers only.
"""

from __future__ import annotations

from rich.text import Text

from gpumon.core.format import duration, elide, size
from gpumon.core.runs.monitor import RunSummary
from gpumon.core.runs.spec import RunSpec
from gpumon.tui.widgets.keyed_table import KeyedTable, SortCell
from gpumon.tui.widgets.render import STATE_STYLE, leak_style, number, short_run_id

Columns = tuple[tuple[str, str, int], ...]  # key, header, width
MEMORY_WIDTH = 13  # room for a memory warning: "▲+15.2 KiB/it"
WIDE: Columns = (
    ("id", "ID", 25),
    ("kind", "KIND", 8),
    ("status", "STATUS", 8),
    ("elapsed", "ELAPSED", 7),
    ("step", "STEP", 7),
    ("loss", "LOSS", 8),
    ("rate", "SAMPLES/S", 9),
    ("memory", "MEMORY", MEMORY_WIDTH),
    ("program", "PROGRAM", 14),
)
MEDIUM: Columns = WIDE[:-1]
COMPACT: Columns = (
    ("id", "ID", 11),  # the short id: kind and random part
    ("status", "STATUS", 8),
    ("elapsed", "TIME", 6),
    ("step", "STEP", 6),
    ("loss", "LOSS", 7),
    ("rate", "SAMP/S", 6),
    ("memory", "MEMORY", MEMORY_WIDTH),
)


def columns_for(width: int) -> Columns:
    """The richest column set that fits ``width`` terminal columns (cell padding, border, scrollbar)."""
    for columns in (WIDE, MEDIUM):
        if sum(w + 2 for _, _, w in columns) + 3 <= width:
            return columns
    return COMPACT


def growth_marker(slope: float, width: int = MEMORY_WIDTH) -> str:
    """ "▲+7.6 KiB/it": memory growth per iteration, shortened to fit ``width``."""
    for text in (f"▲+{size(slope)}/it", f"▲{size(slope)}/it", f"▲{size(slope)}"):
        if len(text) <= width:
            break
    return text


def program_label(spec: RunSpec) -> str:
    """The program, after "n1/2 " for node 1 of a 2-node group (gpumon launch --hosts)."""
    return f"n{spec.node_rank}/{spec.nnodes} {spec.label()}" if spec.group else spec.label()


def run_cells(s: RunSummary, id_width: int) -> dict[str, SortCell]:
    def right(value: str, style: str = "") -> Text:
        return Text(value, style=style, justify="right")

    record = s.record
    elapsed = record.elapsed()
    leak = s.leak
    warn = leak_style(leak)
    if leak is not None:  # memory grows per iteration: the rate in place of the size, in the warning colour
        memory = Text.assemble((growth_marker(leak.slope), warn), justify="right")
    else:
        memory = right("" if s.memory is None else size(s.memory))
    shown_id = s.id if len(s.id) <= id_width else short_run_id(s.id)
    cells = {
        # a span, not Text(style=): Text equality ignores its base style, and update-by-diff compares cells
        "id": SortCell((record.created, s.id), Text.assemble((shown_id, warn))),
        "kind": SortCell(record.spec.kind, Text(record.spec.kind)),
        "status": SortCell(s.state, Text(s.state, style=STATE_STYLE.get(s.state, ""))),
        "elapsed": SortCell(elapsed or 0.0, right(duration(elapsed) if elapsed is not None else "")),
        "step": SortCell(s.step or -1, right("" if s.step is None else str(s.step))),
        "loss": SortCell(s.loss, right(number(s.loss))),
        "rate": SortCell(s.samples_per_s, right("" if s.samples_per_s is None else f"{s.samples_per_s:.0f}")),
        "memory": SortCell(s.memory or -1, memory),
        "program": SortCell(program_label(record.spec), Text(elide(program_label(record.spec), 14))),
    }
    return cells


class RunTable(KeyedTable):
    """One row per run, newest on top, keyed by run id; cells change in place."""

    def __init__(self) -> None:
        super().__init__(id="run-table", cursor_type="row", zebra_stripes=False)
        self.shown: dict[str, RunSummary] = {}
        self.column_set: Columns = ()
        self._reselect: str | None = None
        self._ended: set[str] = set()  # rows last drawn with an ended state
        self.border_title = "runs"

    def _set_columns(self, columns: Columns) -> None:
        selected = self.selected_id()
        self.clear(columns=True)  # only when the terminal's width picks other columns, never per tick
        for key, label, width in columns:
            self.add_column(label, key=key, width=width)
        self.column_set, self.shown, self._ended = columns, {}, set()
        if selected is not None:
            self._reselect = selected

    def show(
        self,
        summaries: list[RunSummary],
        width: int,
        total: int | None = None,
        matched: int | None = None,
        query: str = "",
        live: int | None = None,
    ) -> None:
        """Rows for ``summaries`` at a terminal ``width``: added, changed cell by cell, or removed.

        ``total``, ``live``: every run and the live ones (the title counts them); ``matched``: how many the
        filter ``query`` kept."""
        if columns_for(width) != self.column_set:
            self._set_columns(columns_for(width))
        columns = [c for c, _, _ in self.column_set]
        id_width = self.column_set[0][2]
        wanted = {s.id: s for s in summaries}
        selected = self._reselect or self.selected_id()
        added = False
        for key in [k for k in self.shown if k not in wanted]:
            self.remove_row(key)
        for key, summary in wanted.items():
            old = self.shown.get(key)
            if old is summary and key in self._ended:
                continue  # shown as ended: its summary object changes only when its files do
            cells = run_cells(summary, id_width)
            if old is None:
                self.add_row(*(cells[c] for c in columns), key=key)
                added = True
                continue
            for column in columns:
                if self.get_cell(key, column) != cells[column]:
                    self.update_cell(key, column, cells[column])
        self.shown = wanted
        self._ended = {key for key, summary in wanted.items() if not summary.record.live}
        if added:
            self.sort("id", key=lambda cell: cell.key, reverse=True)
            if selected in wanted:
                self.select_run(selected)
        self._reselect = None
        if live is None:
            live = sum(1 for s in summaries if s.record.live)
        title = f"runs · {len(summaries) if total is None else total:,}" + (f" · {live} live" if live else "")
        kept = len(summaries) if matched is None else matched
        if query:
            title += f" · '{query}': {kept:,}"
        if kept > len(summaries):
            title += f" · newest {len(summaries):,} shown (/ filters)"
        if title != self.border_title:
            self.border_title = title

    def select_run(self, run_id: str) -> bool:
        return self.select_key(run_id)
