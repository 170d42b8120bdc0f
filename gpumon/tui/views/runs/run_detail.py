"""The selected run: what it is, why it failed, loss and memory per iteration, and a log tail per rank."""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from gpumon.core.doctor.stall_text import stall_headline
from gpumon.core.format import duration, loss, size
from gpumon.core.runs.reading.ledger import goodput_words
from gpumon.core.runs.reading.progress import eta_text, quiet_text, rate_text
from gpumon.core.runs.reading.rank_rows import proc_count, sharing
from gpumon.core.runs.reading.sources import LOSS_FROM, reported_words
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.reading.use import mfu_text
from gpumon.core.runs.reading.use import rate_text as use_rate
from gpumon.core.runs.record.values import is_nonfinite
from gpumon.core.visible import visible
from gpumon.tui.views.runs.log_parts import empty_log
from gpumon.tui.views.runs.rank_lanes import lanes_text
from gpumon.tui.views.runs.reading import LAUNCHER, LOG_LINES
from gpumon.tui.views.runs.remote import HostNote, RemoteRun, remote_info
from gpumon.tui.views.runs.run_command import RunCommand
from gpumon.tui.views.runs.run_table import NONFINITE_STYLE
from gpumon.tui.views.runs.time_bar import time_bar
from gpumon.tui.widgets.charts import SERIES_STYLES, Chart, Series, nonpositive
from gpumon.tui.widgets.log_view import LogTail, LogView
from gpumon.tui.widgets.render import STATE_STYLE, leak_style

FIT_STYLE = {"growing": "bright_yellow", "leak": "bright_red"}  # the fitted line: none of SERIES_STYLES


def log_name(choice: int | None) -> str:
    return "launcher" if choice is LAUNCHER else f"rank {choice}"


def info_text(summary: RunSummary | None) -> Text:
    if summary is None:
        return Text.assemble(
            ("No run selected. ", "bold"), "Press ", ("n", "bold"), " to start one (or: gpumon launch ddp)."
        )
    record, spec = summary.record, summary.record.spec
    line = Text.assemble((summary.id, "bold"), " · ", (summary.state_label, STATE_STYLE.get(summary.state, "")))
    if record.exit_code is not None:
        line.append(f" (exit {record.exit_code})")
    line.append(f" · {duration(record.elapsed())} · ")
    line.append(visible(spec.label()), style="bold")  # a name or arguments may hold escapes: shown, not obeyed
    line.append(f" · {proc_count(record, summary.ranks)} proc")
    if spec.gpus is not None:
        line.append(f" · GPUs {spec.gpus}")
    if summary.memory_kind:
        line.append(f" · {'CPU' if summary.memory_kind == 'heap' else summary.memory_kind}")
    if summary.memory is not None:  # which figure MEMORY is, and RSS beside it as top shows it
        what = "live heap" if summary.memory_kind == "heap" else "CUDA allocated"
        line.append(f" · {what} {size(summary.memory)}")
        if summary.rss is not None:
            line.append(f", RSS {size(summary.rss)}")
    line.append_text(progress_info(summary))
    if goodput := goodput_words(summary.ledger):  # where the wall time went (issue 52: ledger.py)
        line.append(f" · {goodput}")
    if summary.loss_source and summary.loss_source != "telemetry":  # telemetry.log: the script's own call
        line.append(f" · loss from {LOSS_FROM.get(summary.loss_source, summary.loss_source)}")
    if summary.skipped:
        line.append(f" · {summary.skipped} bad event line(s) skipped", style="yellow")
    bar = time_bar(summary.use.get("time_split"))
    if bar is not None:  # where the step's time goes (issue 37): measured shares, the rest left blank
        line.append("\n").append_text(bar)
    if len(summary.ranks) > 1:  # each rank's step: a rank that falls behind or stops shows here
        line.append(f"\n{ranks_line(summary)}", style="dim")
    if (lanes := lanes_text(summary.lanes)) is not None:  # each rank's own work and wait: the slow rank's lane
        line.append("\n").append_text(lanes)
    elif summary.lanes_unknown:  # on a GPU the host's clocks cannot score the ranks: said, never guessed
        line.append(f"\nslow-rank lanes {summary.lanes_unknown}", style="dim")
    if reported := reported_words(summary.reported):  # the script's names: plain text, never markup
        line.append(f"\n{visible(reported)}")
    if summary.slurm:  # its words are Slurm's (a reason, node names): plain text, never markup
        line.append(f"\n{visible(summary.slurm)}", style="cyan")
    if summary.queue is not None and summary.state == "queued":  # why it waits, in words (core/queue/plan.py)
        line.append("\n")
        line.append(summary.queue[1], style="cyan")
    stall = record.status.get("stall")
    if isinstance(stall, dict) and summary.state == "stalled":  # where each rank waits: the script's words, plain
        line.append(f"\n{visible(stall_headline(stall))}", style="yellow")
        for said in stall.get("collectives") or ():  # each rank's last collective (core/doctor/stuck.py)
            line.append(f"\n  {visible(str(said))}", style="dim")
    error = error_text(summary)
    if error is not None:
        line.append("\n").append_text(error)
    for note in summary.notes[-2:]:
        line.append(f"\n• {visible(note)}", style="dim")
    return line


def ranks_line(summary: RunSummary) -> str:
    """ "ranks: 0 at step 40 (pid 4711) · 1 at step 38 (pid 4712)": pids while the run lives, hosts where they
    differ."""
    hosts = {row.host for row in summary.ranks}
    parts = []
    for row in summary.ranks:
        part = f"{row.rank} at step {row.step:,}" if row.step is not None else f"{row.rank} (no step yet)"
        where = [f"pid {row.pid}"] if summary.record.live and row.pid is not None else []
        where += [row.host] if len(hosts) > 1 and row.host else []
        parts.append(part + (f" ({', '.join(where)})" if where else ""))
    return "ranks: " + " · ".join(parts)


def use_words(use: dict[str, Any]) -> str:
    """ " · MFU 41% (bf16) · 3.2 TFLOP/s · 52.1k tok/s", or on a CPU " · 1.2 GFLOP/s (no MFU: ...)"."""
    if use.get("achieved_flops_per_s") is None:
        return ""
    flops = use_rate(use["achieved_flops_per_s"], "FLOP/s")
    tokens = f" · {use_rate(use['tokens_per_s'], 'tok/s')}" if use.get("tokens_per_s") else ""
    estimate = " est." if use.get("flops_method") == "estimate" else ""
    if use.get("mfu") is None:
        return f" · {flops}{estimate}{tokens}"
    return f" · MFU {mfu_text(use['mfu'])} ({use.get('flops_dtype')}){estimate} · {flops}{tokens}"


def progress_info(summary: RunSummary) -> Text:
    """ " · step 37/100 (plan) 37% · ETA 4m12s · 12.3 it/s · loss nan": how far, how fast, a non-finite loss."""
    line = Text()
    if summary.total_steps:
        # how far in the total's own unit: a tqdm bar's count is its own (micro-batches, samples), not steps
        where = summary.position if summary.position is not None else summary.step
        unit = "" if summary.total_source == "tqdm" else "step "
        line.append(f" · {unit}{where or 0:,}/{summary.total_steps:,} ({summary.total_source or '?'})")
        if summary.progress is not None:
            line.append(f" {int(summary.progress * 100)}%")
    elif summary.progress_why and summary.record.live:
        line.append(" · progress unknown")
    if summary.eta_s is not None:
        line.append(f" · ETA {eta_text(summary.eta_s)}")
    if summary.step_time_s:
        line.append(f" · {rate_text(summary.step_time_s)}")
    if quiet := quiet_text(summary.quiet_s, summary.median_step_s):
        line.append(f" · {quiet}", style="yellow")
    line.append(use_words(summary.use))
    if is_nonfinite(summary.loss):
        line.append(f" · loss {summary.loss}", style=NONFINITE_STYLE)
    return line


def error_text(summary: RunSummary) -> Text | None:
    """The run's error: the supervisor's (with torchrun's root-cause rank), else the last exception."""
    error = summary.record.status.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    rank = error.get("rank") if isinstance(error, dict) else None
    if not message:
        message = summary.exception
    if not message and summary.state == "failed":
        message = f"exit code {summary.record.exit_code}"
    if not message:
        return None
    first = str(message).strip().splitlines()[0] if str(message).strip() else str(message)
    text = Text("✗ ", style="bold red")
    if rank is not None:
        text.append(f"rank {rank} (root cause): ", style="bold red")
    text.append(visible(first), style="red")
    if summary.exception and summary.exception != message:
        text.append(f"  last exception: {visible(summary.exception)}", style="red")
    return text


def loss_series(summary: RunSummary | None) -> list[Series]:
    if summary is None or not summary.loss_values:
        return []
    return [Series(summary.loss_steps, summary.loss_values, "green")]


def memory_series(summary: RunSummary | None) -> list[Series]:
    if summary is None:
        return []
    return [
        Series(steps, values, SERIES_STYLES[i % len(SERIES_STYLES)])
        for i, (_rank, (steps, values)) in enumerate(sorted(summary.memory_series.items()))
        if values
    ]


def warning_rank(summary: RunSummary | None) -> int | None:
    """The rank whose memory warns (``summary.leak``), or None."""
    if summary is None or summary.leak is None:
        return None
    leak = summary.leak
    return next((rank for rank, state in summary.leaks.items() if state is leak), None)


def fit_series(summary: RunSummary | None) -> Series | None:
    """The warning rank's fitted line, value(step) = current + slope * (step - state.step), over the plotted steps.

    It starts where it meets the lowest plotted value (or at the first step), so it never stretches the scale down.
    """
    rank = warning_rank(summary)
    if summary is None or rank is None or rank not in summary.memory_series:
        return None
    state = summary.leaks[rank]
    if state.current is None or state.step is None or state.slope <= 0:
        return None
    plotted = [(steps, values) for steps, values in summary.memory_series.values() if values]
    first = min(steps[0] for steps, _ in plotted)
    last = max(steps[-1] for steps, _ in plotted)
    low = min(min(values) for _, values in plotted)

    def value(step: float) -> float:
        return state.current + state.slope * (step - state.step)  # type: ignore[operator]

    start = max(first, math.ceil(state.step - (state.current - low) / state.slope))
    if start >= last:
        return None
    return Series((start, last), (value(start), value(last)), FIT_STYLE.get(state.state, "bright_white"))


def memory_line(summary: RunSummary | None, width: int = 200) -> Text | None:
    """ "▲ memory: leak: +7.6 KiB/iter (…) · d: doctor" while a rank's memory warns, else the run's first
    warning ("▲ input-bound: 74% of each step waits for data …"), else None.

    The trend is cut to leave the hint whole in ``width`` cells.
    """
    rank = warning_rank(summary)
    if summary is not None and rank is None and summary.warnings:  # input-bound, oversubscribed, diverging
        line = Text(f"▲ {summary.warnings[0]}", style="yellow")
        line.truncate(max(8, width - len(" · d: doctor")), overflow="ellipsis")
        return line.append(" · ", style="dim").append("d", style="bold").append(": doctor", style="dim")
    if summary is None or rank is None:
        return None
    state = summary.leaks[rank]
    line = Text.assemble(("▲ memory", leak_style(state)), ": ")
    if len(summary.leaks) > 1:
        line.append(f"rank {rank} ")
    trend = Text(state.describe(), style=leak_style(state))
    trend.truncate(max(8, width - len(line) - len(" · d: doctor")), overflow="ellipsis")
    line.append_text(trend)
    line.append(" · ", style="dim")
    line.append("d", style="bold")
    line.append(": doctor", style="dim")
    return line


def memory_legend(summary: RunSummary | None) -> str:
    if summary is None or len(summary.memory_series) < 2:
        return ""
    ranks = sorted(summary.memory_series)
    legend = " ".join(f"[{SERIES_STYLES[i % len(SERIES_STYLES)]}]■[/] r{r}" for i, r in enumerate(ranks))
    rank = warning_rank(summary)
    if rank is not None:
        legend += f" [{FIT_STYLE.get(summary.leaks[rank].state, 'bright_white')}]╱[/] fit r{rank}"
    return legend


class RunDetail(Vertical):
    """Info and error lines, the two charts side by side, then the log."""

    def __init__(self) -> None:
        super().__init__(id="run-detail")
        self.summary: RunSummary | None = None
        self._ended = False
        self._fit: tuple[object, Series | None] | None = None  # (what it was fitted from, the line)
        self._remote: str | None = None  # the key of the remote run (or host note) shown

    def compose(self) -> ComposeResult:
        yield Static(info_text(None), id="run-info")
        yield RunCommand()
        yield Static("", id="run-memory")
        with Horizontal(id="run-charts"):
            yield Chart(loss, "no loss reported yet", id="loss-chart")
            yield Chart(size, "no per-step memory yet", id="memory-chart")
        yield LogView(id="run-log")

    def on_mount(self) -> None:
        self.query_one("#loss-chart").border_title = "loss / step"
        self.query_one("#memory-chart").border_title = "memory / step"
        self.query_one("#run-log").border_title = "log"

    def show(self, summary: RunSummary | None) -> None:
        if summary is self.summary and self._ended:
            return  # drawn as ended: the summary object changes only when the run's files do
        self.summary = summary
        self._ended = summary is not None and not summary.record.live
        if self._remote is not None:  # back from another host's run: its charts again, no note of its log
            self._remote = None
            self.query_one("#run-charts").display = True
            self.query_one("#run-log", LogView).set_note("")
        self.query_one("#run-info", Static).update(info_text(summary))
        self.query_one(RunCommand).show(summary)
        self.query_one("#loss-chart", Chart).show(loss_series(summary))
        self._loss_titles()
        warning = memory_line(summary, (self.content_size.width or self.app.size.width) - 2)
        line = self.query_one("#run-memory", Static)
        line.set_class(warning is not None, "-warning")
        if warning is not None:
            line.update(warning)
        memory = self.query_one("#memory-chart", Chart)
        memory.show([*memory_series(summary), *self._fitted(summary)])
        kind = summary.memory_kind if summary is not None else ""
        title = f"memory / step · {'CPU heap' if kind == 'heap' else kind}" if kind else "memory / step"
        if memory.border_title != title:
            memory.border_title = title
        legend = memory_legend(summary)
        if memory.border_subtitle != legend:
            memory.border_subtitle = legend
        if summary is None:
            self.show_log(None)

    def set_log_scale(self, log: bool) -> None:
        """The loss chart's y axis: log10 or linear (``y``)."""
        self.query_one("#loss-chart", Chart).set_log(log)
        self._loss_titles()

    def _loss_titles(self) -> None:
        chart = self.query_one("#loss-chart", Chart)
        title = "loss / step · log y" if chart.log_y else "loss / step"
        skipped = nonpositive(chart.series) if chart.log_y else 0
        notes = [f"{skipped} value(s) <= 0 not drawn"] if skipped else []
        if self.summary is not None and self.summary.loss_note:  # NaN/inf: not drawn, said here
            notes.append(f"[{NONFINITE_STYLE}]{self.summary.loss_note}[/]")
        subtitle = " · ".join(notes)
        if chart.border_title != title:
            chart.border_title = title
        if chart.border_subtitle != subtitle:
            chart.border_subtitle = subtitle

    def _fitted(self, summary: RunSummary | None) -> list[Series]:
        """The fitted line, the same Series object while its inputs are (so the chart need not redraw)."""
        rank = warning_rank(summary)
        key = (
            None
            if summary is None or rank is None
            else (summary.leaks[rank], tuple(id(s) for s, _ in summary.memory_series.values()))
        )
        if self._fit is None or self._fit[0] != key:
            self._fit = (key, fit_series(summary))
        fit = self._fit[1]
        return [fit] if fit is not None else []

    def show_log(self, tail: LogTail | None) -> None:
        log = self.query_one("#run-log", LogView)
        if tail is None or self.summary is None or tail.run_id != self.summary.id:
            log.show((), "no log yet" if self.summary is not None else "")
            log.border_title, log.border_subtitle = "log", ""
            return
        log.show(tail.lines, empty_log(tail.choice, tail.choices, self.summary.record.live))
        title = f"log · {log_name(tail.choice)}" if tail.choices else "log"
        shared = sharing(self.summary.record, self.summary.ranks).get(tail.choice)
        if shared:  # one output for several ranks (spawned by the script): their lines cannot be told apart
            title = f"log · ranks {', '.join(map(str, shared))} (one shared output)"
        subtitle = "".join(
            f"[b reverse] {log_name(c)} [/]" if c == tail.choice else f" {log_name(c)} " for c in tail.choices
        )
        if len(tail.choices) > 1:
            subtitle += "· l/L"
        if log.border_title != title:
            log.border_title = title
        if log.border_subtitle != subtitle:
            log.border_subtitle = subtitle

    def show_remote(self, run: RemoteRun | None, note: HostNote | None) -> None:
        """Another host's run (its ``gpumon runs --json`` fields; the log comes through ssh), or a host's note."""
        self.summary, self._ended = None, False
        key = run.key if run is not None else note.key if note is not None else None
        if run is not None:
            info = remote_info(run)
        else:
            info = Text(f"{note.host.name}: {note.text}" if note is not None else "", style="red")
        self.query_one("#run-info", Static).update(info)
        self.query_one(RunCommand).hide()
        self.query_one("#run-memory", Static).set_class(False, "-warning")
        if key != self._remote:
            self._remote = key
            self.query_one("#run-charts").display = False  # no series come through ssh: the log gets the room
            log = self.query_one("#run-log", LogView)
            log.show((), "reading its log through ssh…" if run is not None else "")
            log.set_note("")
            log.border_title, log.border_subtitle = ("log · rank 0 · through ssh" if run else "log"), ""

    def remote_log_lines(self, lines: tuple[str, ...], replace: bool) -> None:
        """A followed remote log's new lines: appended, or all of them when they ``replace`` what is shown."""
        log = self.query_one("#run-log", LogView)
        if replace:
            log.show(lines, "no output yet")
        else:
            log.append(lines, LOG_LINES)

    def remote_log_note(self, note: str | None, following: bool) -> None:
        """Why the remote log stopped coming (None: it comes, or it is complete), and whether it is followed."""
        log = self.query_one("#run-log", LogView)
        log.set_note(note or "")
        subtitle = "following" if following else "" if note else "complete: the run ended"
        if log.border_subtitle != subtitle:
            log.border_subtitle = subtitle
