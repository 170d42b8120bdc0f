"""The doctor's text: ``gpumon doctor RUN``'s sections and order, with colour."""

from __future__ import annotations

import re

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from gpumon.core.doctor.oom_blocks import oom_lines
from gpumon.core.doctor.report import Diagnosis
from gpumon.core.doctor.straggler import slow_lines
from gpumon.core.format import size
from gpumon.core.runs.record.store import RunRecord
from gpumon.tui.plain import PlainText
from gpumon.tui.widgets.render import STATE_STYLE, leak_style


def doctor_text(diagnosis: Diagnosis, record: RunRecord, asked: bool = False) -> Text:
    """The diagnosis, most important first: gpumon.cli.doctor.render's sections with colour. A ``PlainText``:
    it quotes the run's words (its error lines, its exception), shown and never obeyed."""
    text = PlainText()
    text.append(record.id, style="bold")
    text.append("  ")
    text.append(record.state, style=STATE_STYLE.get(record.state, ""))
    if record.exit_code not in (None, 0):
        text.append(f", exit code {record.exit_code}")
    worst = diagnosis.worst
    nan = diagnosis.loss is not None and diagnosis.loss.kind == "nonfinite"
    headline_style = "bold red" if diagnosis.failure is not None or nan else leak_style(worst) or "bold green"
    headline_style = "bold yellow" if diagnosis.stalled and diagnosis.failure is None else headline_style
    text.append("\n")
    text.append(diagnosis.headline(), style=headline_style)

    def section(title: str) -> None:
        text.append(f"\n\n{title}", style="bold underline")

    if diagnosis.stall is not None:
        from gpumon.core.doctor.stall_text import stall_section

        section("stalled" if diagnosis.stalled else "last stall")
        for line in stall_section(diagnosis.stall, diagnosis.stalled, record.dir):
            text.append(f"\n  {line}", style="yellow" if diagnosis.stalled else "")
    if diagnosis.leaks:
        section("memory per iteration")
        for rank, state in diagnosis.leaks.items():
            current = f", now {size(state.current)}" if state.current is not None else ""
            text.append(f"\n  rank {rank}: ")
            text.append(state.describe(), style=leak_style(state))
            text.append(current, style="dim")
    if slowness := slow_lines(diagnosis.slow, diagnosis.lanes):
        section("what slows it, the larger cost first")
        for i, line in enumerate(slowness):
            text.append(f"\n  {line}", style="yellow" if i < len(diagnosis.slow) else "")
    elif diagnosis.lanes_unknown:  # ranks on a GPU: no straggler can be named from the host's clocks
        section("the slow rank")
        text.append(f"\n  {diagnosis.lanes_unknown}", style="dim")
    if diagnosis.loss is not None:
        section("loss")
        text.append(f"\n  {diagnosis.loss.text}", style="bold red" if nan else "yellow")
        for label, said in diagnosis.loss.details():
            text.append(f"\n  {label}: ", style="dim")
            text.append(said)
    warning = any(s.grows for s in diagnosis.leaks.values())
    if diagnosis.causes:
        section("what grows (tensor census)")
        for cause in diagnosis.causes:
            text.append(f"\n  rank {cause.rank}: ")
            text.append(cause.title, style="bold")
            text.append("\n    seen: ", style="dim")
            text.append(cause.evidence)
            text.append("\n    fix:  ", style="dim")
            text.append(cause.advice, style="green")
    elif diagnosis.census_pending or (asked and record.live):
        section("what grows (tensor census)")
        text.append("\n  census pending: asked the run for two tensor censuses; waiting for them", style="yellow")
    elif record.live and warning:
        section("what grows (tensor census)")
        text.append("\n  press ")
        text.append("c", style="bold")
        text.append(" to ask the run for a tensor census and name what grows")
    failure = diagnosis.failure
    if failure is not None and failure.kind == "stopped":
        section("stopped")
        text.append(f"\n  {failure.title}", style="yellow")
    elif failure is not None:
        where = f" (rank {failure.rank})" if failure.rank is not None else ""
        section(f"failure{where}")
        text.append(f"\n  {failure.title}", style="bold red")
        for line in failure.shown_evidence:
            text.append(f"\n  {line}", style="red")
        if failure.detail:
            text.append(f"\n  {failure.detail}")
        for line in oom_lines(failure.snapshot):  # what held the GPU at a CUDA OOM (oom_blocks.py)
            text.append(f"\n  {line}")
        if failure.kind == "unknown":
            text.append(f"\n  (not a known pattern: the whole error is in gpumon logs {record.id})", style="dim")
    if diagnosis.advice:
        section("what to change, best first")
        for n, advice in enumerate(diagnosis.advice, 1):
            text.append(f"\n  {n}. ")
            text.append(advice.title, style="bold")
            text.append("\n     why:    ", style="dim")
            text.append(advice.why)
            text.append("\n     change: ", style="dim")
            text.append(advice.change, style="green")
    return text


def empty_text() -> Text:
    return Text.assemble(
        ("No run to diagnose. ", "bold"), "Select a run in the Runs view (r) and press ", ("d", "bold"), "."
    )


# The label a wrapped line hangs under: "1. ", "why:    ", "rank 0: ", "seen: " (lower case: not an error's
# "RuntimeError: "), at most 24 cells so the value keeps the room.
_LABEL = re.compile(r"(\d+\. |rank \d+: |[a-z][a-z -]{0,20}: +)")


def hanging(text: Text) -> Group:
    """Each line of ``text`` wrapped under its own start: its indent, and its label when it has one (the
    terminal's wrap would send the rest of "  rank 0: growing ... runs out" to column 0)."""
    rows: list[Text | Table] = []
    for line in text.split("\n"):
        plain = line.plain
        indent = len(plain) - len(plain.lstrip(" "))
        label = _LABEL.match(plain, indent)
        if label is not None:
            indent = label.end()
        if indent == 0 or indent >= len(plain):
            rows.append(line)
            continue
        grid = Table.grid()
        grid.add_column(width=indent, no_wrap=True)
        grid.add_column(ratio=1)
        grid.add_row(line[:indent], line[indent:])
        rows.append(grid)
    return Group(*rows)


class DoctorText(Static):
    """The doctor's text, its wrapped lines hanging under their labels; ``text`` is what it shows, unwrapped."""

    def __init__(self, text: Text, id: str | None = None) -> None:
        super().__init__(hanging(text), id=id)
        self.text = text

    def show(self, text: Text) -> None:
        self.text = text
        self.update(hanging(text))
