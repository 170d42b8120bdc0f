"""The run list: one row per run, newest on top, updated by diff (rows keyed by run id).

The columns follow the terminal's width: full ids, kind and program when they
fit, else short ids ("ddp-c132") and the numbers only. With a fleet, a HOST column
comes first and other hosts' runs are rows too, keyed "HOST:RUN" (remote.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

from rich.text import Text

from gpumon.core.format import count_fit, duration, elide, loss_fit, size
from gpumon.core.runs.reading.progress import progress_text, quiet_short, rate_text
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.reading.use import mfu_text
from gpumon.core.runs.record.spec import KINDS, RunSpec
from gpumon.core.runs.record.values import is_nonfinite, metric_value
from gpumon.core.visible import visible
from gpumon.tui.views.runs.remote import HostNote, Remote, RemoteRun
from gpumon.tui.widgets.keyed_table import KeyedTable, SortCell, fit_columns, hidden_note, title_room
from gpumon.tui.widgets.literal import set_title
from gpumon.tui.widgets.render import STATE_STYLE, leak_style, short_run_id

Columns = tuple[tuple[str, str, int], ...]  # key, header, width
MEMORY_WIDTH = 13  # room for a memory warning: "▲+15.2 KiB/it"
KIND_WIDTH = max(len(kind) for kind in KINDS)  # "model-parallel" whole
STATUS_WIDTH = len("unsupervised")  # the longest state
PROGRESS_WIDTH = len("37% 23h59m")  # progress and ETA (progress.py)
SPEED_WIDTH = len("12.3 it/s")  # the rate: it/s, or s/it when a step takes more than a second
LOSS_WIDTH = len("-2.32e-06")  # the longest loss format.loss writes (3 significant digits): LOSS always has it,
# so that the columns never move as the loss goes from 12.3 to 0.000123 to nan (issue 50); longer ones are fitted
DROP = ("rate", "speed", "progress")  # what a narrower terminal leaves out next, in order (named in the title)
PROGRAM_MIN = 10  # PROGRAM takes the room left, at least this (longer labels end in "…")
WIDE: Columns = (
    ("id", "ID", 25),
    ("kind", "KIND", KIND_WIDTH),
    ("status", "STATUS", STATUS_WIDTH),
    ("elapsed", "ELAPSED", 7),
    ("step", "STEP", 7),
    ("progress", "PROGRESS", PROGRESS_WIDTH),
    ("speed", "SPEED", SPEED_WIDTH),
    ("loss", "LOSS", LOSS_WIDTH),
    ("rate", "SAMPLES/S", 9),
    ("memory", "MEMORY", MEMORY_WIDTH),
    ("program", "PROGRAM", 60),
)
MEDIUM: Columns = WIDE[:-1]
COMPACT: Columns = (
    ("id", "ID", 11),  # the short id: kind and random part
    ("status", "STATUS", STATUS_WIDTH),
    ("elapsed", "TIME", 6),
    ("step", "STEP", 6),
    ("progress", "PROG", 9),
    ("speed", "SPEED", SPEED_WIDTH),
    ("loss", "LOSS", LOSS_WIDTH),
    ("rate", "SAMP/S", 6),
    ("memory", "MEMORY", MEMORY_WIDTH),
)
# The short id with KIND and PROGRAM: where the whole id does not fit, the program says more than its date.
SHORT_WIDE: Columns = (COMPACT[0], WIDE[1], *COMPACT[1:], WIDE[-1])
SHORT_MEDIUM: Columns = SHORT_WIDE[:-1]
HOST: Columns = (("host", "HOST", 10),)
Row = RunSummary | RemoteRun | HostNote


Widths = Mapping[str, int]
WIDE_WIDTHS: Widths = MappingProxyType({key: width for key, _, width in WIDE})  # STEP, SAMPLES/S fit theirs
MFU: Columns = (("mfu", "MFU", 5),)  # after SAMPLES/S once a run counted its FLOPs (core/runs/reading/use.py)


def _with_mfu(columns: Columns) -> Columns:
    keys = [key for key, _, _ in columns]
    at = keys.index("rate") + 1 if "rate" in keys else len(columns)
    return (*columns[:at], *MFU, *columns[at:])


def fit_for(
    width: int,
    hosts: bool = False,
    kind_width: int = KIND_WIDTH,
    status_width: int = STATUS_WIDTH,
    mfu: bool = False,
) -> tuple[Columns, tuple[str, ...]]:
    """The richest column set that fits ``width`` terminal columns (cell padding, border, scrollbar), and the
    headers it leaves out; ``hosts``: a HOST column first (the app watches a fleet). KIND and STATUS are as wide
    as the longest value shown (``kind_width``, ``status_width``): never cut, and no wider than needed. The
    numbers' columns have fixed widths, their values fitted (count_fit, loss_fit). ``mfu``: a run counted its
    FLOPs, so an MFU column (the first to go where room lacks)."""
    first = HOST if hosts else ()
    sized = {"kind": kind_width, "status": status_width}
    room = width - 3
    add: Callable[[Columns], Columns] = _with_mfu if mfu else (lambda columns: columns)
    first_drop: tuple[str, ...] = ("mfu",) if mfu else ()
    sets = ((WIDE, ()), (SHORT_WIDE, DROP[:2]), (MEDIUM, DROP[:2]), (SHORT_MEDIUM, DROP))
    for columns, drop in sets:
        wanted = tuple((key, label, sized.get(key, w)) for key, label, w in first + add(columns))
        fitted, _ = fit_columns(wanted, room, "program", PROGRAM_MIN, (*first_drop, *drop))
        if sum(w + 2 for _, _, w in fitted) <= room:
            return fitted, tuple(label for key, label, _ in add(WIDE) if key not in {c[0] for c in fitted})
    compact = tuple((key, label, sized.get(key, w)) for key, label, w in first + add(COMPACT))
    fitted, dropped = fit_columns(compact, room, drop=(*first_drop, *DROP))
    return fitted, ("KIND", *dropped, "PROGRAM")


def columns_for(width: int, hosts: bool = False) -> Columns:
    return fit_for(width, hosts)[0]


def any_mfu(items: list[Row]) -> bool:
    """Whether a row's run has an MFU (its FLOPs counted on a GPU whose peak is known; others show "—"). Runs
    on a CPU only add no column: a title asking to widen the terminal for a column of dashes would mislead."""
    for item in items:
        if isinstance(item, RunSummary) and item.use.get("mfu") is not None:
            return True
        if isinstance(item, RemoteRun) and item.row.get("mfu") is not None:
            return True
    return False


def value_widths(items: list[Row]) -> tuple[int, int]:
    """The widths of KIND and STATUS for these rows: their longest kind and state (at least 8, "pipeline",
    "finished"; a host's note is laid over these cells too)."""
    kinds, states = [8], [8]
    for item in items:
        if isinstance(item, RunSummary):
            kinds.append(len(item.record.spec.kind))
            states.append(len(item.state_label))
        elif isinstance(item, RemoteRun):
            kinds.append(len(str(item.row.get("kind") or "")))
            states.append(len(item.state))
    return min(max(kinds), KIND_WIDTH), max(states)


def growth_marker(slope: float, width: int = MEMORY_WIDTH) -> str:
    """ "▲+7.6 KiB/it": memory growth per iteration, shortened to fit ``width``."""
    for text in (f"▲+{size(slope)}/it", f"▲{size(slope)}/it", f"▲{size(slope)}"):
        if len(text) <= width:
            break
    return text


def program_label(spec: RunSpec) -> str:
    """The program, after "n1/2 " for node 1 of a 2-node group (gpumon launch --hosts); its control characters
    shown as text (an escape or a newline in a run's name would clear the screen or split the row)."""
    return visible(f"n{spec.node_rank}/{spec.nnodes} {spec.label()}" if spec.group else spec.label())


NONFINITE_STYLE = "bold red"  # a NaN or infinite loss: the value, in the warning style


def loss_key(loss: float | None) -> float:
    """How LOSS sorts: unknown and non-finite values last."""
    return loss if loss is not None and math.isfinite(loss) else math.inf


def loss_text(loss: float | None) -> Text:
    """The loss, right-aligned, fitted to LOSS; nan/inf in the warning style (a span: update-by-diff compares spans)."""
    return Text.assemble((loss_fit(loss, LOSS_WIDTH), NONFINITE_STYLE if is_nonfinite(loss) else ""), justify="right")


def right(value: str, style: str = "") -> Text:
    return Text(value, style=style, justify="right")


def shown_id(run_id: str, id_width: int) -> str:
    return run_id if len(run_id) <= id_width else short_run_id(run_id)


def common_cells(
    kind: str,
    state: str,
    elapsed: float | None,
    step: int | None,
    loss: float | None,
    rate: float | None,
    progress: tuple[float | None, float | None, float | None] = (None, None, None),
    wide: Widths = WIDE_WIDTHS,
) -> dict[str, SortCell]:
    """The cells a run of this machine and one of another host show alike; ``progress``: (progress 0..1,
    ETA seconds, seconds per step); ``wide``: the columns' widths (STEP and SAMPLES/S fit theirs)."""
    done, eta, per_step = progress
    return {
        "progress": SortCell(-1.0 if done is None else done, right(progress_text(done, eta))),
        "speed": SortCell(0.0 if not per_step else 1 / per_step, right(rate_text(per_step))),
        "kind": SortCell(kind, Text(kind)),
        "status": SortCell(state, Text(state, style=STATE_STYLE.get(state.split()[0] if state else "", ""))),
        "elapsed": SortCell(elapsed or 0.0, right(duration(elapsed) if elapsed is not None else "")),
        "step": SortCell(step or -1, right("" if step is None else count_fit(step, wide["step"]))),
        "loss": SortCell(loss_key(loss), loss_text(loss)),
        "rate": SortCell(rate, right("" if rate is None else count_fit(rate, wide["rate"]))),
    }


def run_cells(s: RunSummary, id_width: int, host: str = "", wide: Widths = WIDE_WIDTHS) -> dict[str, SortCell]:
    record = s.record
    leak = s.leak
    warn = leak_style(leak) or ("yellow" if s.warnings and record.live else "")  # slow: the doctor says why
    if leak is not None:  # memory grows per iteration: the rate in place of the size, in the warning colour
        memory = Text.assemble((growth_marker(leak.slope), warn), justify="right")
    else:
        memory = right("" if s.memory is None else size(s.memory))
    shown = (s.progress, s.eta_s, s.step_time_s)
    cells = {
        # a span, not Text(style=): Text equality ignores its base style, and update-by-diff compares cells
        "id": SortCell((record.created, s.id), Text.assemble((shown_id(s.id, id_width), warn))),
        **common_cells(record.spec.kind, s.state_label, record.elapsed(), s.step, s.loss, s.samples_per_s, shown, wide),
        "memory": SortCell(s.memory or -1, memory),
        "mfu": mfu_cell(s.use.get("mfu")),
        "program": SortCell(program_label(record.spec), Text(program_label(record.spec))),
        "host": SortCell(host, Text(elide(host, 10))),
    }
    return quiet_status(cells, s.state_label, s.quiet_s, s.median_step_s)


def quiet_status(cells: dict[str, SortCell], state: str, quiet_s: float | None, median: float | None) -> dict:
    """A running run that stopped stepping, before the stall rule says stalled: "no step 88s" in its STATUS."""
    quiet = quiet_short(quiet_s, median) if state == "running" else ""
    if quiet:
        cells["status"] = SortCell(state, Text(quiet, style="yellow"))
    return cells


def remote_cells(run: RemoteRun, id_width: int, wide: Widths = WIDE_WIDTHS) -> dict[str, SortCell]:
    """A row of another host's ``gpumon runs --json``: the same columns, from its fields."""
    row = run.row

    def num(key: str) -> float | None:
        return metric_value(row.get(key))  # "nan"/"inf" in JSON: the values they stand for

    step, memory = num("step"), num("memory_bytes")
    started = num("started") or 0.0
    kind = visible(str(row.get("kind") or ""))  # another host's words: shown, never obeyed
    cells = {
        "id": SortCell((started, run.id), Text(visible(shown_id(run.id, id_width)))),
        **common_cells(kind, visible(run.state), run.elapsed(), None if step is None else int(step),
                       num("loss"), num("samples_per_s"), (num("progress"), num("eta_s"), num("step_time_s")), wide),
        "memory": SortCell(memory or -1, right("" if memory is None else size(int(memory)))),
        "mfu": mfu_cell(num("mfu")),
        "program": SortCell(run.program(), Text(visible(run.program()))),  # another host's words
        "host": SortCell(run.host.name, Text(elide(run.host.name, 10), style="bold")),
    }  # fmt: skip
    return quiet_status(cells, visible(run.state), num("quiet_s"), num("median_step_s"))


def note_cells(note: HostNote, columns: Columns) -> dict[str, SortCell]:
    """A host's one line of why: its words laid over the columns after HOST, whole words per cell."""
    cells = {"host": SortCell(note.host.name, Text(elide(note.host.name, 10), style="bold red"))}
    words = f"⚠ {note.text}".split()
    cells_left = [(key, width) for key, _, width in columns if key != "host"]
    for index, (key, width) in enumerate(cells_left):
        taken: list[str] = []
        while words and len(" ".join([*taken, words[0]])) <= width:
            taken.append(words.pop(0))
        later = max((w for _, w in cells_left[index + 1 :]), default=0)
        if index == len(cells_left) - 1:  # the last cell holds the rest (cut with … where it must be)
            taken, words = [*taken, *words], []
        elif not taken and words and len(words[0]) > later:  # fits no cell to come: cut it here
            taken, words[0] = [words[0][:width]], words[0][width:]
        # else a word too long for this cell waits for a wider one: never split mid-word
        cells[key] = SortCell((-1.0, note.host.name) if key == "id" else "", Text(" ".join(taken), style="red"))
    return cells


def mfu_cell(mfu: float | None) -> SortCell:
    return SortCell(-1.0 if mfu is None else mfu, right(mfu_text(mfu)))


def row_cells(item: Row, columns: Columns, id_width: int, local: str) -> dict[str, SortCell]:
    wide = {**WIDE_WIDTHS, **{key: width for key, _, width in columns}}  # a column left out: its cells unseen
    if isinstance(item, RemoteRun):
        return remote_cells(item, id_width, wide)
    if isinstance(item, HostNote):
        return note_cells(item, columns)
    return run_cells(item, id_width, local, wide)


MARK = "● "  # a run marked for comparison (space), as htop's tagged processes
MARK_STYLE = "bold yellow"


def marked_cell(cell: SortCell, marked: bool) -> SortCell:
    """The id cell with the comparison mark, or without it."""
    plain = cell.text.plain.removeprefix(MARK)
    if not marked:
        return cell if plain == cell.text.plain else SortCell(cell.key, cell.text[len(MARK) :])
    if plain != cell.text.plain:
        return cell
    return SortCell(cell.key, Text.assemble((MARK, MARK_STYLE), cell.text))


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
        self.hidden: tuple[str, ...] = ()  # headers of the columns the width leaves out
        self._reselect: str | None = None
        self._ended: set[str] = set()  # rows last drawn with an ended state
        self.marked: set[str] = set()  # runs marked for comparison
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
        items: list[Row] = [*summaries, *(remote[0] if remote else ()), *(remote[1] if remote else ())]
        fitted, self.hidden = fit_for(width, remote is not None, *value_widths(items), mfu=any_mfu(items))
        if fitted != self.column_set:
            self._set_columns(fitted)
        columns = [c for c, _, _ in self.column_set]
        id_width = next(w for c, _, w in self.column_set if c == "id")
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
            if key in self.marked:
                cells["id"] = marked_cell(cells["id"], True)
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
        title += hidden_note(self.hidden, title_room(self, title))
        set_title(self, title)  # holds the filter's words

    def mark(self, run_id: str, marked: bool) -> None:
        """Show or clear the comparison mark in the run's row."""
        if marked:
            self.marked.add(run_id)
        else:
            self.marked.discard(run_id)
        if run_id in self.shown:
            self.update_cell(run_id, "id", marked_cell(self.get_cell(run_id, "id"), marked))

    def select_run(self, run_id: str) -> bool:
        return self.select_key(run_id)
