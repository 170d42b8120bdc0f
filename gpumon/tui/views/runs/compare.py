"""Marked runs compared (``c`` in the Runs view): their loss curves in one chart, one colour each, and a table.

The curves are the runs' downsampled series (summary.json through ``RunsMonitor.summary``, read by the
Runs view's worker, never raw events); best loss is the lowest value the series kept (each bucket keeps
its minimum, so a dip survives downsampling). A live run's curve grows while the screen is open.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static

from gpumon.core.format import duration, loss
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.visible import visible
from gpumon.tui.views.runs.run_table import NONFINITE_STYLE, loss_text
from gpumon.tui.widgets.charts import SERIES_STYLES, Chart, Series, nonpositive
from gpumon.tui.widgets.footer import KeysFooter
from gpumon.tui.widgets.render import STATE_STYLE

MIN_RUNS = 2


class ComparedRuns(Message):
    """The Runs view's worker read the marked runs with their series."""

    def __init__(self, summaries: tuple[RunSummary, ...]) -> None:
        self.summaries = summaries
        super().__init__()


class Comparison:
    """The Runs view's marked runs (in marking order), the comparison open, and the runs read for it."""

    def __init__(self) -> None:
        self.marked: list[str] = []
        self.screen: CompareScreen | None = None
        self._read: dict[str, RunSummary] = {}  # with their series; an ended run's never change

    def toggle(self, run_id: str) -> bool:
        """Mark or unmark ``run_id``; True when it is marked now."""
        if run_id in self.marked:
            self.marked.remove(run_id)
            return False
        self.marked.append(run_id)
        return True

    def wanted(self) -> tuple[str, ...]:
        """The compared runs the worker must read: not read yet, or live (their curves grow)."""
        if self.screen is None:
            return ()
        read = self._read
        return tuple(i for i in self.screen.run_ids if i not in read or read[i].record.live)

    def got(self, summaries: Sequence[RunSummary]) -> None:
        for summary in summaries:
            self._read[summary.id] = summary
        if self.screen is not None:
            self.screen.show([self._read[i] for i in self.screen.run_ids if i in self._read])


def run_label(summary: RunSummary) -> str:
    name = summary.record.spec.name
    return f"{summary.id} ({visible(name)})" if name else summary.id


def compare_series(summaries: Sequence[RunSummary]) -> list[Series]:
    return [
        Series(s.loss_steps, s.loss_values, SERIES_STYLES[i % len(SERIES_STYLES)])
        for i, s in enumerate(summaries)
        if s.loss_values
    ]


def legend(summaries: Sequence[RunSummary]) -> Text:
    """One swatch per run in its curve's colour; a run without a loss says so."""
    text = Text()
    for i, summary in enumerate(summaries):
        if i:
            text.append("   ")
        text.append("■ ", style=SERIES_STYLES[i % len(SERIES_STYLES)])
        text.append(run_label(summary))
        if summary.loss_note:
            text.append(f" ({summary.loss_note})", style=NONFINITE_STYLE)
        elif not summary.loss_values:
            text.append(" (no loss reported)", style="dim")
    return text


def best_loss(summary: RunSummary) -> float | None:
    if summary.loss_best is not None:
        return summary.loss_best
    return min(summary.loss_values) if summary.loss_values else None


def table(summaries: Sequence[RunSummary]) -> Table:
    grid = Table(box=None, padding=(0, 2), expand=False, header_style="bold")
    for header, justify in (("RUN", "left"), ("STATUS", "left"), ("FINAL LOSS", "right"), ("BEST LOSS", "right"),
                            ("STEPS", "right"), ("ELAPSED", "right")):  # fmt: skip
        grid.add_column(header, justify=justify)  # type: ignore[arg-type]
    for i, s in enumerate(summaries):
        elapsed = s.record.elapsed()
        grid.add_row(
            Text.assemble(("■ ", SERIES_STYLES[i % len(SERIES_STYLES)]), run_label(s)),
            Text(s.state, style=STATE_STYLE.get(s.state, "")),
            loss_text(s.loss),  # nan/inf in the warning style
            Text(loss(best_loss(s))),
            Text("" if s.step is None else f"{s.step:,}"),
            Text("" if elapsed is None else duration(elapsed)),
        )
    return grid


class CompareScreen(Screen[bool]):
    DEFAULT_CSS = """
    CompareScreen #compare-head { height: 1; background: $panel; padding: 0 1; }
    CompareScreen #compare-chart { height: 1fr; border: round $primary-darken-2; border-title-color: $text; }
    CompareScreen #compare-legend { height: auto; padding: 0 1; }
    CompareScreen #compare-table { height: auto; max-height: 40%; padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape", "close", "back", id="compare_close", tooltip="back to the Runs view"),
        Binding("y", "log_scale", "log y", id="compare_log_scale", tooltip="the loss axis: linear / log"),
    ]

    def __init__(self, run_ids: Sequence[str], log: bool = False) -> None:
        super().__init__()
        self.run_ids = tuple(run_ids)
        self.log_y = log
        self.summaries: tuple[RunSummary, ...] = ()

    def compose(self) -> ComposeResult:
        yield Static(id="compare-head")
        yield Chart(loss, "reading the runs…", id="compare-chart", log_y=self.log_y)
        yield Static(id="compare-legend")
        yield Static(id="compare-table")
        yield KeysFooter()  # keys left out whole where the width is short, as the views' footer

    def on_mount(self) -> None:
        self._head()
        self._titles()

    def show(self, summaries: Sequence[RunSummary]) -> None:
        """The marked runs read again (in the order they were marked)."""
        by_id = {s.id: s for s in summaries}
        ordered = tuple(by_id[i] for i in self.run_ids if i in by_id)
        if ordered == self.summaries:
            return
        self.summaries = ordered
        chart = self.query_one("#compare-chart", Chart)
        chart.empty = "none of these runs reported a loss"
        chart.show(compare_series(ordered))
        self.query_one("#compare-legend", Static).update(legend(ordered))
        self.query_one("#compare-table", Static).update(table(ordered))
        self._titles()

    def _head(self) -> None:
        head = Text.assemble(("Comparing ", "bold"), (f"{len(self.run_ids)} runs", "bold"), " · loss against step")
        head.append("   y: log/linear · esc: back", style="dim")
        self.query_one("#compare-head", Static).update(head)

    def _titles(self) -> None:
        chart = self.query_one("#compare-chart", Chart)
        chart.border_title = "loss / step · log y" if self.log_y else "loss / step"
        skipped = nonpositive(chart.series) if self.log_y else 0
        chart.border_subtitle = f"{skipped} value(s) <= 0 not drawn on the log axis" if skipped else ""

    def action_log_scale(self) -> None:
        self.log_y = not self.log_y
        self.query_one("#compare-chart", Chart).set_log(self.log_y)
        self._titles()

    def action_close(self) -> None:
        self.dismiss(self.log_y)  # the Runs view's loss chart keeps the scale chosen here
