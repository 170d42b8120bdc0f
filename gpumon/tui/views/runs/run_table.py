"""The run list: one row per run, newest on top, updated by diff (rows keyed by run id).

The columns follow the terminal's width: full ids, kind and program when they
fit, else short ids ("ddp-c132") and the numbers only. With a fleet, a HOST column
comes first and other hosts' runs are rows too, keyed "HOST:RUN" (remote.py).
"""

from __future__ import annotations

from rich.text import Text

from gpumon.core.format import duration, elide, size
from gpumon.core.runs.monitor import RunSummary
from gpumon.core.runs.spec import RunSpec
from gpumon.tui.views.runs.remote import HostNote, Remote, RemoteRun
from gpumon.tui.widgets.keyed_table import KeyedTable, SortCell
from gpumon.tui.widgets.literal import set_title
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
HOST: Columns = (("host", "HOST", 10),)
Row = RunSummary | RemoteRun | HostNote


def columns_for(width: int, hosts: bool = False) -> Columns:
    """The richest column set that fits ``width`` terminal columns (cell padding, border, scrollbar);
    ``hosts``: a HOST column first (the app watches a fleet)."""
    first = HOST if hosts else ()
    for columns in (WIDE, MEDIUM):
        if sum(w + 2 for _, _, w in first + columns) + 3 <= width:
            return first + columns
    return first + COMPACT


def growth_marker(slope: float, width: int = MEMORY_WIDTH) -> str:
    """ "▲+7.6 KiB/it": memory growth per iteration, shortened to fit ``width``."""
    for text in (f"▲+{size(slope)}/it", f"▲{size(slope)}/it", f"▲{size(slope)}"):
        if len(text) <= width:
            break
    return text


def program_label(spec: RunSpec) -> str:
    """The program, after "n1/2 " for node 1 of a 2-node group (gpumon launch --hosts)."""
    return f"n{spec.node_rank}/{spec.nnodes} {spec.label()}" if spec.group else spec.label()


def right(value: str, style: str = "") -> Text:
    return Text(value, style=style, justify="right")


def shown_id(run_id: str, id_width: int) -> str:
    return run_id if len(run_id) <= id_width else short_run_id(run_id)


def common_cells(
    kind: str, state: str, elapsed: float | None, step: int | None, loss: float | None, rate: float | None
) -> dict[str, SortCell]:
    """The cells a run of this machine and one of another host show alike."""
    return {
        "kind": SortCell(kind, Text(kind)),
        "status": SortCell(state, Text(state, style=STATE_STYLE.get(state, ""))),
        "elapsed": SortCell(elapsed or 0.0, right(duration(elapsed) if elapsed is not None else "")),
        "step": SortCell(step or -1, right("" if step is None else str(step))),
        "loss": SortCell(loss, right(number(loss))),
        "rate": SortCell(rate, right("" if rate is None else f"{rate:.0f}")),
    }


def run_cells(s: RunSummary, id_width: int, host: str = "") -> dict[str, SortCell]:
    record = s.record
    leak = s.leak
    warn = leak_style(leak)
    if leak is not None:  # memory grows per iteration: the rate in place of the size, in the warning colour
        memory = Text.assemble((growth_marker(leak.slope), warn), justify="right")
    else:
        memory = right("" if s.memory is None else size(s.memory))
    cells = {
        # a span, not Text(style=): Text equality ignores its base style, and update-by-diff compares cells
        "id": SortCell((record.created, s.id), Text.assemble((shown_id(s.id, id_width), warn))),
        **common_cells(record.spec.kind, s.state, record.elapsed(), s.step, s.loss, s.samples_per_s),
        "memory": SortCell(s.memory or -1, memory),
        "program": SortCell(program_label(record.spec), Text(elide(program_label(record.spec), 14))),
        "host": SortCell(host, Text(elide(host, 10))),
    }
    return cells


def remote_cells(run: RemoteRun, id_width: int) -> dict[str, SortCell]:
    """A row of another host's ``gpumon runs --json``: the same columns, from its fields."""
    row = run.row

    def num(key: str) -> float | None:
        value = row.get(key)
        return value if isinstance(value, (int, float)) else None

    step, memory = num("step"), num("memory_bytes")
    started = num("started") or 0.0
    return {
        "id": SortCell((started, run.id), Text(shown_id(run.id, id_width))),
        **common_cells(str(row.get("kind") or ""), run.state, run.elapsed(), None if step is None else int(step),
                       num("loss"), num("samples_per_s")),
        "memory": SortCell(memory or -1, right("" if memory is None else size(int(memory)))),
        "program": SortCell(run.program(), Text(elide(run.program(), 14))),
        "host": SortCell(run.host.name, Text(elide(run.host.name, 10), style="bold")),
    }  # fmt: skip


def note_cells(note: HostNote, columns: Columns) -> dict[str, SortCell]:
    """A host's one line of why: its words laid over the columns after HOST, whole words per cell."""
    cells = {"host": SortCell(note.host.name, Text(elide(note.host.name, 10), style="bold red"))}
    words = f"⚠ {note.text}".split()
    for key, _, width in columns:
        if key == "host":
            continue
        taken: list[str] = []
        while words and len(" ".join([*taken, words[0]])) <= width:
            taken.append(words.pop(0))
        if not taken and words:  # a word longer than the cell: cut it there
            taken, words[0] = [words[0][:width]], words[0][width:]
        cells[key] = SortCell((-1.0, note.host.name) if key == "id" else "", Text(" ".join(taken), style="red"))
    return cells


def row_cells(item: Row, columns: Columns, id_width: int, local: str) -> dict[str, SortCell]:
    if isinstance(item, RemoteRun):
        return remote_cells(item, id_width)
    if isinstance(item, HostNote):
        return note_cells(item, columns)
    return run_cells(item, id_width, local)


def row_key(item: Row) -> str:
    return item.id if isinstance(item, RunSummary) else item.key


def row_live(item: Row) -> bool:
    if isinstance(item, HostNote):
        return False
    return item.record.live if isinstance(item, RunSummary) else item.live


class RunTable(KeyedTable):
    """One row per run, newest on top, keyed by run id; cells change in place."""

    def __init__(self) -> None:
        super().__init__(id="run-table", cursor_type="row", zebra_stripes=False)
        self.shown: dict[str, Row] = {}
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
        remote: Remote | None = None,
        local: str = "",
    ) -> None:
        """Rows for ``summaries`` at a terminal ``width``: added, changed cell by cell, or removed.

        ``total``, ``live``: every run and the live ones (the title counts them); ``matched``: how many the
        filter ``query`` kept. ``remote``: other hosts' runs and notes (with a fleet: a HOST column, this
        machine's runs named ``local``)."""
        if columns_for(width, remote is not None) != self.column_set:
            self._set_columns(columns_for(width, remote is not None))
        columns = [c for c, _, _ in self.column_set]
        id_width = next(w for c, _, w in self.column_set if c == "id")
        items: list[Row] = [*summaries, *(remote[0] if remote else ()), *(remote[1] if remote else ())]
        wanted = {row_key(item): item for item in items}
        selected = self._reselect or self.selected_id()
        added = False
        for key in [k for k in self.shown if k not in wanted]:
            self.remove_row(key)
        for key, summary in wanted.items():
            old = self.shown.get(key)
            if (old is summary or (not isinstance(old, RunSummary) and old == summary)) and key in self._ended:
                continue  # shown as ended: its summary object changes only when its files do
            cells = row_cells(summary, self.column_set, id_width, local)
            if old is None:
                self.add_row(*(cells[c] for c in columns), key=key)
                added = True
                continue
            for column in columns:
                if self.get_cell(key, column) != cells[column]:
                    self.update_cell(key, column, cells[column])
        self.shown = wanted
        self._ended = {key for key, item in wanted.items() if not row_live(item)}
        if added:
            self.sort("id", key=lambda cell: cell.key, reverse=True)
            if selected in wanted:
                self.select_run(selected)
        self._reselect = None
        if live is None:
            live = sum(1 for s in summaries if s.record.live)
        runs = len(summaries) if total is None else total
        if remote:  # the other hosts' runs count too; how many hosts is in the HOST column
            runs, live = runs + len(remote[0]), live + sum(1 for r in remote[0] if r.live)
        title = f"runs · {runs:,}" + (f" · {live} live" if live else "")
        kept = len(summaries) if matched is None else matched
        if query:
            title += f" · '{query}': {kept:,}"
        if kept > len(summaries):
            title += f" · newest {len(summaries):,} shown (/ filters)"
        set_title(self, title)  # holds the filter's words

    def select_run(self, run_id: str) -> bool:
        return self.select_key(run_id)
