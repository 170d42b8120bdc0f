"""The Doctor view: one run's diagnosis (memory trend per rank, census causes, the failure, ranked advice).

The same content and order as ``gpumon doctor RUN`` (cli_doctor.render), as
scrollable styled text. A thread worker runs ``diagnose`` when the view opens
on a run and every ``REFRESH_S`` while it shows a live run; the event loop
never reads run files. The run's telemetry is kept between refreshes, so a
refresh reads only the events that arrived since.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from gpumon.core.doctor.leak import LeakWatch
from gpumon.core.doctor.report import Diagnosis, diagnose
from gpumon.core.format import size
from gpumon.core.runs.store import RunNotFound, RunRecord, RunStore
from gpumon.core.runs.telemetry import RunTelemetry
from gpumon.tui.run_detail import STATE_STYLE, leak_style

REFRESH_S = 2.0


@dataclass(frozen=True)
class Found:
    record: RunRecord
    diagnosis: Diagnosis


class DoctorReady(Message):
    """The worker's answer for run ``run_dir`` (None: newest run asked, none exists)."""

    def __init__(self, wanted: Path | None, found: Found | None) -> None:
        self.wanted = wanted
        self.found = found
        super().__init__()


def doctor_text(diagnosis: Diagnosis, record: RunRecord, asked: bool = False) -> Text:
    """The diagnosis, most important first: cli_doctor.render's sections with colour."""
    text = Text()
    text.append(record.id, style="bold")
    text.append("  ")
    text.append(record.state, style=STATE_STYLE.get(record.state, ""))
    if record.exit_code not in (None, 0):
        text.append(f", exit code {record.exit_code}")
    worst = diagnosis.worst
    headline_style = "bold red" if diagnosis.failure is not None else leak_style(worst) or "bold green"
    text.append("\n")
    text.append(diagnosis.headline(), style=headline_style)

    def section(title: str) -> None:
        text.append(f"\n\n{title}", style="bold underline")

    if diagnosis.leaks:
        section("memory per iteration")
        for rank, state in diagnosis.leaks.items():
            current = f", now {size(state.current)}" if state.current is not None else ""
            text.append(f"\n  rank {rank}: ")
            text.append(state.describe(), style=leak_style(state))
            text.append(current, style="dim")
    warning = any(s.warning for s in diagnosis.leaks.values())
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
    if failure is not None:
        where = f" (rank {failure.rank})" if failure.rank is not None else ""
        section(f"failure{where}")
        text.append(f"\n  {failure.title}", style="bold red")
        for line in failure.evidence[:3]:
            text.append(f"\n  {line.strip()}", style="red")
        if failure.detail:
            text.append(f"\n  {failure.detail}")
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


class DoctorView(VerticalScroll):
    """The diagnosis of one run as scrollable text; ``open`` picks the run."""

    can_focus = True

    def __init__(self, store: RunStore | None = None) -> None:
        super().__init__(id="doctor")
        self.store = store
        self.wanted: Path | None = None  # the run dir asked for; None: the newest run
        self.found: Found | None = None
        self.asked: set[str] = set()  # runs asked for a census here, until a diagnosis says pending/causes
        self._telemetry: tuple[Path, RunTelemetry, LeakWatch] | None = None  # kept: each refresh reads what is new
        self._busy = False
        self._again = False
        self._failed: str | None = None
        self._shown: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text("diagnosing…", style="dim"), id="doctor-text")

    def on_mount(self) -> None:
        self.border_title = "doctor"
        self.set_interval(REFRESH_S, self._tick)

    @property
    def record(self) -> RunRecord | None:
        return self.found.record if self.found is not None else None

    def open(self, record: RunRecord | None) -> None:
        """Diagnose ``record`` (None: the newest run) now."""
        wanted = record.dir if record is not None else None
        if wanted != self.wanted or self.found is None:
            self.wanted = wanted
            if self.found is not None and self.found.record.dir != wanted:
                self.found = None
                self._draw(Text("diagnosing…", style="dim"))
        self.poll()

    def _tick(self) -> None:
        if self.display and self.found is not None and self.found.record.live:
            self.poll()

    def poll(self) -> None:
        if self._busy:
            self._again = True
            return
        self._busy = True
        self._diagnose(self.wanted)

    @work(thread=True, exit_on_error=False, group="doctor", description="diagnose a run")
    def _diagnose(self, wanted: Path | None) -> None:
        self.store = self.store or RunStore()
        if wanted is None:
            try:
                record: RunRecord | None = self.store.resolve("last")
            except RunNotFound:
                self.post_message(DoctorReady(None, None))
                return
        else:
            record = self.store.load(wanted)
            if record is None:
                raise RunNotFound(f"run {wanted.name} is gone")
        assert record is not None
        if self._telemetry is None or self._telemetry[0] != record.dir:
            self._telemetry = (record.dir, RunTelemetry(record.dir), LeakWatch())
        _, telemetry, watch = self._telemetry
        telemetry.update()
        self.post_message(DoctorReady(wanted, Found(record, diagnose(record, telemetry, watch=watch))))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "doctor" or event.state not in (WorkerState.ERROR, WorkerState.CANCELLED):
            return
        self._busy = False
        error = str(event.worker.error)
        if error != self._failed:  # say it once, not every refresh
            self._failed = error
            self.notify(f"Doctor: could not diagnose the run: {error}", severity="error", timeout=8)
        self._next()

    def on_doctor_ready(self, message: DoctorReady) -> None:
        self._busy = False
        self._failed = None
        if message.wanted == self.wanted:
            self.found = message.found
            if message.found is None:
                self.border_title = "doctor"
                self._draw(empty_text())
            else:
                record, diagnosis = message.found.record, message.found.diagnosis
                if diagnosis.causes or diagnosis.census_pending or not record.live:
                    self.asked.discard(record.id)  # the files tell from now on
                self.border_title = f"doctor · {record.id}"
                self._draw(doctor_text(diagnosis, record, record.id in self.asked))
        self._next()

    def _next(self) -> None:
        if self._again:
            self._again = False
            self.poll()

    def _draw(self, text: Text) -> None:
        if text.markup != self._shown:  # an unchanged diagnosis costs no layout pass
            self._shown = text.markup
            self.query_one("#doctor-text", Static).update(text)

    def census_asked(self, run_id: str) -> None:
        """A census was just asked for: say so until the run's files show it."""
        self.asked.add(run_id)
        if self.found is not None and self.found.record.id == run_id:
            self._draw(doctor_text(self.found.diagnosis, self.found.record, True))
        self.poll()
