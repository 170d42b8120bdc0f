"""The experiment list: one row per run with Tune events, newest on top, updated by diff."""

from __future__ import annotations

from rich.text import Text

from gpumon.core.format import elide
from gpumon.core.runs.reading.experiments import ExperimentInfo
from gpumon.tui.widgets.keyed_table import KeyedTable, SortCell
from gpumon.tui.widgets.render import STATE_STYLE, number, short_run_id

Columns = tuple[tuple[str, str, int], ...]  # key, header, width
WIDE: Columns = (
    ("run", "EXPERIMENT", 25),
    ("state", "STATE", 8),
    ("label", "NAME", 14),
    ("search", "SEARCH", 16),
    ("metric", "METRIC", 12),
    ("trials", "TRIALS", 9),
    ("best", "BEST", 9),
)
COMPACT: Columns = (
    ("run", "EXPERIMENT", 11),
    ("state", "STATE", 8),
    ("search", "SEARCH", 14),
    ("metric", "METRIC", 10),
    ("trials", "TRIALS", 7),
    ("best", "BEST", 8),
)


def columns_for(width: int) -> Columns:
    return WIDE if sum(w + 2 for _, _, w in WIDE) + 3 <= width else COMPACT


def search_label(info: ExperimentInfo) -> str:
    return f"{info.search_alg or '?'} / {info.scheduler or '?'}"


def trials_label(info: ExperimentInfo) -> str:
    return f"{info.done}/{info.num_samples if info.num_samples is not None else '?'}"


def experiment_cells(info: ExperimentInfo, columns: Columns) -> dict[str, SortCell]:
    def right(value: str) -> Text:
        return Text(value, justify="right")

    widths = {key: width for key, _, width in columns}
    run_id = info.run_id if len(info.run_id) <= widths["run"] else short_run_id(info.run_id)
    metric = f"{info.metric} {info.mode or ''}".strip() if info.metric else "–"
    cells = {
        "run": SortCell((info.created, info.run_id), Text(run_id)),
        "state": SortCell(info.state, Text(info.state, style=STATE_STYLE.get(info.state, ""))),
        "label": SortCell(info.label, Text(elide(info.label, widths.get("label", 14)))),
        "search": SortCell(search_label(info), Text(elide(search_label(info), widths["search"]))),
        "metric": SortCell(metric, Text(elide(metric, widths["metric"]))),
        "trials": SortCell(info.done, right(trials_label(info))),
        "best": SortCell(info.best or 0.0, right(number(info.best))),
    }
    return {key: cells[key] for key, _, _ in columns}


class ExperimentTable(KeyedTable):
    """Past and live experiments; the highlighted one fills the trial table."""

    def __init__(self) -> None:
        super().__init__(id="experiment-table", cursor_type="row", zebra_stripes=False)
        self.column_set: Columns = ()
        self.shown: dict[str, ExperimentInfo] = {}
        self.border_title = "experiments"

    def show(self, infos: list[ExperimentInfo], width: int, selected: str | None) -> None:
        if columns_for(width) != self.column_set:
            self.clear(columns=True)  # only when the terminal's width picks other columns
            self.column_set, self.shown = columns_for(width), {}
            for key, label, column_width in self.column_set:
                self.add_column(label, key=key, width=column_width)
        wanted = {info.run_id: info for info in infos}
        added = False
        for key in [k for k in self.shown if k not in wanted]:
            self.remove_row(key)
        for key, info in wanted.items():
            old = self.shown.get(key)
            if old == info:
                continue
            cells = experiment_cells(info, self.column_set)
            if old is None:
                self.add_row(*cells.values(), key=key)
                added = True
                continue
            for column, cell in cells.items():
                if self.get_cell(key, column) != cell:
                    self.update_cell(key, column, cell)
        self.shown = wanted
        if added:
            self.sort("run", key=lambda cell: cell.key, reverse=True)
        if selected is not None and selected != self.selected_id():
            self.select_run(selected)
        live = sum(1 for info in infos if info.live)
        title = f"experiments · {len(infos)}" + (f" · {live} live" if live else "")
        if title != self.border_title:
            self.border_title = title

    def select_run(self, run_id: str) -> bool:
        return self.select_key(run_id)

    def cycle(self, step: int) -> str | None:
        """Highlight the next (step 1) or previous experiment; returns its run id."""
        if not self.row_count:
            return None
        self.move_cursor(row=(self.cursor_row + step) % self.row_count, animate=False)
        return self.selected_id()
