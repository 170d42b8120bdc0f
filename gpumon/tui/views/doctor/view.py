"""The Doctor view: one run's diagnosis (memory trend per rank, census causes, the failure, ranked advice).

The same content and order as ``gpumon doctor RUN`` (gpumon.cli.doctor.render), as
scrollable styled text. A thread worker runs ``diagnose`` when the view opens
on a run and every ``REFRESH_S`` while it shows a live run; the event loop
never reads run files. The run's telemetry is kept between refreshes, so a
refresh reads only the events that arrived since. A run of another fleet host
(selected in Runs) shows that host's own ``gpumon doctor RUN`` text, read through ssh.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from gpumon.core.doctor.leak import LeakWatch
from gpumon.core.doctor.report import Diagnosis, diagnose
from gpumon.core.fleet.remote_runs import remote_doctor
from gpumon.core.protocol import DEFAULT_GAP, request_census
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.store import RunNotFound, RunRecord, RunStore
from gpumon.core.visible import visible_log
from gpumon.tui.unseen import DrawnLate
from gpumon.tui.view import AppContext, View
from gpumon.tui.views.doctor.text import DoctorText, doctor_text, empty_text
from gpumon.tui.widgets.focus_look import FocusLook
from gpumon.tui.widgets.literal import set_title

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


class RemoteDoctorRead(Message):
    """Another host's ``gpumon doctor RUN`` text, or why it could not be read."""

    def __init__(self, key: tuple[str, str], text: str, reason: str | None) -> None:
        self.key = key
        self.text = text
        self.reason = reason
        super().__init__()


class DoctorView(FocusLook, View, VerticalScroll):
    """The diagnosis of one run as scrollable text; ``open`` picks the run."""

    NAME = "doctor"
    TITLE = "Doctor"
    KEYS = "d,alt+d"
    HELP_NOTE = "the run selected in Runs, else the newest: memory trend per rank, what grows, failure, advice"
    BINDINGS = [
        Binding("c", "census", "census", id="census", tooltip="ask the live run for a tensor census: names what grows"),
    ]
    can_focus = True

    def __init__(self, context: AppContext) -> None:
        super().__init__(id="doctor")
        self.context = context
        self.store = context.store
        self.wanted: Path | None = None  # the run dir asked for; None: the newest run
        self.found: Found | None = None
        self.asked: set[str] = set()  # runs asked for a census here, until a diagnosis says pending/causes
        self._telemetry: tuple[Path, RunTelemetry, LeakWatch] | None = None  # kept: each refresh reads what is new
        self._busy = False
        self._again = False
        self._failed: str | None = None
        self._shown: str | None = None
        self.remote: tuple[str, str] | None = None  # (host, run) while showing another host's run

    def compose(self) -> ComposeResult:
        yield DoctorText(Text("diagnosing…", style="dim"), id="doctor-text")

    def on_mount(self) -> None:
        self.border_title = "doctor"
        self._ticks = self.set_interval(REFRESH_S, self._tick, pause=True)  # while shown (shown, hidden)

    def hidden(self) -> None:
        self._ticks.pause()  # hidden: no tick at all, not a tick that does nothing

    def shown(self) -> None:
        """Diagnose the run selected in the Runs view, else the newest run."""
        self._ticks.resume()
        host, run_id = self.context.selected_host, self.context.selected_run
        if host is not None and run_id is not None and self.context.fleet is not None:
            self.open_remote(host, run_id)
            return
        self._open_picked()

    def ahead(self) -> None:
        """The run `d` would open, diagnosed once shortly after the start: the first `d` drew a bare "doctor" and
        waited on that read (its p90, 170 ms at rest); now it draws the diagnosis held, then reads it anew after its
        frame as every later `d` does. Another host's run is read only when asked (through ssh)."""
        if self.context.selected_host is None:
            self._open_picked()

    def _open_picked(self) -> None:
        runs = self.context.runs
        summary = runs.get(self.context.selected_run or "")
        if summary is None and runs:
            summary = max(runs.values(), key=lambda s: (s.record.created, s.id))
        self.open(summary.record if summary is not None else None)

    def focus_target(self) -> Widget | None:
        return self

    @property
    def record(self) -> RunRecord | None:
        return self.found.record if self.found is not None else None

    def open(self, record: RunRecord | None) -> None:
        """Diagnose ``record`` (None: the newest run) now."""
        wanted = record.dir if record is not None else None
        if self.remote is not None:
            self.remote, self.found = None, None
        if wanted != self.wanted or self.found is None:
            self.wanted = wanted
            if self.found is not None and self.found.record.dir != wanted:
                self.found = None
                self._draw(Text("diagnosing…", style="dim"))
        self.poll()

    def open_remote(self, host: str, run_id: str) -> None:
        """Show ``gpumon doctor RUN`` as the run's host says it, read through ssh in a worker."""
        self.remote, self.found, self.wanted = (host, run_id), None, None
        set_title(self, f"doctor · {run_id} on {host}")
        self._draw(Text(f"asking {host} for its doctor of {run_id} through ssh…", style="dim"))
        fleet = self.context.fleet
        state = next((h for h in fleet.state().hosts if h.host.name == host), None)
        if state is None:
            self._draw(Text(f"{host} is no longer in the fleet", style="red"))
            return

        def read() -> None:
            text, reason = remote_doctor(fleet.ssh, state.host, fleet.gpumon, run_id)
            self.post_message(RemoteDoctorRead((host, run_id), text, reason))

        self.run_worker(read, thread=True, group="doctor-remote", exit_on_error=False, description="remote doctor")

    def on_remote_doctor_read(self, message: RemoteDoctorRead) -> None:
        if message.key != self.remote:
            return
        host, run_id = message.key
        if message.reason is not None:
            self._draw(Text(f"could not read the doctor of {run_id}: {message.reason}", style="red"))
            return
        text = Text(f"{host} · its own gpumon doctor {run_id}, read through ssh when opened\n\n", style="dim")
        self._draw(text + Text.from_ansi(visible_log(message.text, colour=True)))  # another host's words

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
            self.notify(f"Doctor: could not diagnose the run: {error}", severity="error", timeout=8, markup=False)
        self._next()

    def on_doctor_ready(self, message: DoctorReady) -> None:
        self._busy = False
        self._failed = None
        if message.wanted == self.wanted and self.remote is None:
            self.found = message.found
            if message.found is None:
                self.border_title = "doctor"
                self._draw(empty_text())
            else:
                record, diagnosis = message.found.record, message.found.diagnosis
                if diagnosis.causes or diagnosis.census_pending or not record.live:
                    self.asked.discard(record.id)  # the files tell from now on
                set_title(self, f"doctor · {record.id}")
                self._draw(doctor_text(diagnosis, record, record.id in self.asked))
        self._next()

    def _next(self) -> None:
        if self._again:
            self._again = False
            self.poll()

    def _draw(self, text: Text) -> None:
        if text.markup != self._shown:  # an unchanged diagnosis costs no layout pass
            self._shown = text.markup
            self.query_one(DoctorText).show(text)
            if not self.display:  # read ahead (ahead): drawn unseen, if the app drew this view before it came
                self.post_message(DrawnLate(self))

    def census_asked(self, run_id: str) -> None:
        """A census was just asked for: say so until the run's files show it."""
        self.asked.add(run_id)
        if self.found is not None and self.found.record.id == run_id:
            self._draw(doctor_text(self.found.diagnosis, self.found.record, True))
        self.poll()

    def action_census(self) -> None:
        if self.refused("no census is asked for"):
            return
        if self.remote is not None:
            host, run_id = self.remote
            self.notify(f"A run on {host}: gpumon doctor {run_id} --host {host} --census", timeout=8, markup=False)
            return
        record = self.record
        if record is None:
            self.notify("No run to ask: select a run in the Runs view first", severity="warning", markup=False)
            return
        if not record.live:
            self.notify(
                f"{record.id} is {record.state}: a census needs a live run (it looks inside its processes)",
                severity="warning",
                timeout=5,
                markup=False,
            )
            return
        self._request_census(record.id, record.dir)

    @work(thread=True, exit_on_error=False, group="doctor-census", description="ask for a census")
    def _request_census(self, run_id: str, run_dir: Path) -> None:
        try:
            request_census(run_dir)
        except OSError as err:
            self.app.call_from_thread(
                self.notify, f"Could not ask {run_id} for a census: {err}", severity="error", markup=False
            )
            return
        self.app.call_from_thread(self._census_requested, run_id)

    def _census_requested(self, run_id: str) -> None:
        self.notify(f"Asked {run_id} for a tensor census (two, {DEFAULT_GAP} steps apart)", timeout=4, markup=False)
        self.census_asked(run_id)
