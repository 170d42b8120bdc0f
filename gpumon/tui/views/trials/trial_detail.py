"""The Trials view's text: the experiment header, the empty state, and the selected trial (curve, values, error)."""

from __future__ import annotations

import socket

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from gpumon.core.format import duration, size
from gpumon.core.runs.reading.experiments import ExperimentSnapshot, TrialCurves, TrialRow
from gpumon.tui.plain import lines_visible
from gpumon.tui.views.trials.experiment_table import search_label, trials_label
from gpumon.tui.views.trials.trial_cells import NONE, STATUS_STYLE, shown_status, value_text
from gpumon.tui.widgets.charts import Chart, Series
from gpumon.tui.widgets.literal import set_title
from gpumon.tui.widgets.log_view import LogView
from gpumon.tui.widgets.render import STATE_STYLE, number

HERE = socket.gethostname()  # a trial on another node names it beside its pid
EMPTY = Text.assemble(
    ("No Ray Tune experiments yet: ", "bold"),
    "start one with ",
    ("gpumon tune SEARCH.toml", "bold"),
    ", or run your own Tune script, unchanged, with ",
    ("gpumon launch script", "bold"),
    " (gpumon adds its callback through Ray's RAY_TUNE_CALLBACKS).",
)


def params_text(params: dict[str, object], names: tuple[str, ...]) -> str:
    return "  ".join(f"{name}={value_text(params.get(name))}" for name in names if name in params)


def header_text(snap: ExperimentSnapshot) -> Text:
    """Two lines: what the experiment is and how far it got; its best trial so far."""
    info = snap.info
    line = Text.assemble((info.run_id, "bold"), " · ", (info.state, STATE_STYLE.get(info.state, "")))
    line.append(f" · {info.label} · {search_label(info)}")
    if info.metric:
        line.append(f" · {info.metric} ({info.mode or '?'})")
    line.append(f" · trials {trials_label(info)}")
    if info.running:
        line.append(f" · {info.running} running", style="green")
    if info.errors:
        line.append(f" · {info.errors} error{'s' if info.errors > 1 else ''}", style="bold red")
    if info.stop_requested and info.live:
        line.append(" · stop requested", style="yellow")
    if snap.skipped:
        line.append(f" · {snap.skipped} bad event line(s) skipped", style="yellow")
    best = snap.by_id.get(info.best_id or "")
    if best is not None and info.best is not None:
        line.append("\n★ best ", style="bold yellow")
        line.append(best.id, style="bold")
        line.append(f"  {info.metric}={number(info.best)} (last result, as Tune ranks)  ")
        line.append(params_text(best.params, snap.params))
    elif not info.metric:
        line.append("\nno best trial: the experiment names no metric (TuneConfig(metric=..., mode=...))", "dim")
    else:
        line.append(f"\nno {info.metric} reported yet", style="dim")
    return line


def trial_text(row: TrialRow | None, gpu: int | None) -> Text:
    if row is None:
        return Text("No trial selected: ↑/↓ in the trial table.", style="dim")
    status = shown_status(row)
    line = Text.assemble(("trial ", "bold"), (row.id, "bold"), " · ", (status, STATUS_STYLE.get(status, "")))
    if row.iteration is not None:
        line.append(f" · iter {row.iteration}")
    if row.time_total_s is not None:
        line.append(f" · {duration(row.time_total_s)}")
    if row.pid is not None:
        where = f" on {row.hostname or row.node_ip}" if row.hostname not in (None, HERE) else ""
        line.append(f"\npid {row.pid}{where} · GPU {size(gpu) if gpu is not None else NONE}")
    params = params_text(row.params, tuple(sorted(row.params)))
    if params:
        line.append(f"\n{params}")
    metrics = "  ".join(f"{k}={number(v)}" for k, v in sorted(row.metrics.items()))
    if metrics:
        line.append(f"\n{metrics}", style="cyan")
    return line


def chart_metric(snap: ExperimentSnapshot, chosen: str | None) -> str | None:
    """The metric the chart plots: the one chosen with m, else the experiment's, else the first reported."""
    if chosen in snap.metrics:
        return chosen
    return snap.metrics[0] if snap.metrics else snap.info.metric


class ErrorView(LogView):
    """The end of a trial's error text (Tune's traceback), wrapped: its last line is the exception."""

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        if not self.lines or width < 1:
            return Text(self.empty, style="dim")
        shown = lines_visible("\n".join(self.lines[-height:]))  # a trial's traceback: shown, never obeyed
        wrapped = Text(shown).wrap(self.app.console, width, overflow="fold")
        return Text("\n").join(list(wrapped)[-height:])


class TrialDetail(Horizontal):
    """The selected trial's metric curve beside its values and its error text."""

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._info: Text | None = None

    def compose(self) -> ComposeResult:
        yield Chart(number, "no metric reported yet", id="trial-chart")
        with Vertical(id="trial-side"):
            yield Static(Text(""), id="trial-info")
            yield ErrorView(id="trial-error")

    def on_mount(self) -> None:
        self.query_one("#trial-chart").border_title = "curve"
        self.query_one("#trial-error").border_title = "error"

    def show(
        self,
        row: TrialRow | None,
        snap: ExperimentSnapshot,
        curves: TrialCurves | None,
        metric: str | None,
        gpu: int | None,
    ) -> None:
        text = trial_text(row, gpu)
        if text != self._info:  # an unchanged text must not cost a layout pass each tick
            self._info = text
            self.query_one("#trial-info", Static).update(text)
        chart = self.query_one("#trial-chart", Chart)
        curve = curves.curves.get(metric or "") if curves is not None and row is not None else None
        chart.show([Series(curve[0], curve[1], "green")] if curve else [])
        title = f"{metric} / iteration · {row.id}" if metric and row is not None else "curve"
        set_title(chart, title)  # the metric's name is the user's
        subtitle = "m: next metric" if len(snap.metrics) > 1 else ""
        if chart.border_subtitle != subtitle:
            chart.border_subtitle = subtitle
        error = self.query_one("#trial-error", LogView)
        lines = tuple(row.error.rstrip().splitlines()) if row is not None and row.error else ()
        error.show(lines, "no error" if row is not None else "")
        error.set_class(bool(lines), "-failed")
