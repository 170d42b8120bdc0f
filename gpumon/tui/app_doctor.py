"""The Doctor view's app actions: open it on the Runs view's run, ask a live run for a tensor census."""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import App

from gpumon.telemetry.census import DEFAULT_GAP, request_census
from gpumon.tui.doctor_view import DoctorView
from gpumon.tui.runs import RunsView

READONLY = "Read-only mode (--readonly): no census is asked for"


class DoctorActions(App[None]):
    """Mixed into GpumonApp; its bindings live there (d/F5 opens the view, c asks for a census there)."""

    readonly: bool

    @property
    def doctor_view(self) -> DoctorView:
        return self.query_one(DoctorView)

    def open_doctor(self) -> None:
        """Diagnose the run selected in the Runs view, else the newest run (the view is being shown)."""
        runs = self.query_one(RunsView)
        summary = runs.selected()
        if summary is None and runs.summaries:
            summary = max(runs.summaries.values(), key=lambda s: (s.record.created, s.id))
        self.doctor_view.open(summary.record if summary is not None else None)

    def action_census(self) -> None:
        if self.readonly:
            self.notify(READONLY, severity="warning")
            return
        record = self.doctor_view.record
        if record is None:
            self.notify("No run to ask: select a run in the Runs view first", severity="warning")
            return
        if not record.live:
            self.notify(
                f"{record.id} is {record.state}: a census needs a live run (it looks inside its processes)",
                severity="warning",
                timeout=5,
            )
            return
        self._request_census(record.id, record.dir)

    @work(thread=True, exit_on_error=False, group="doctor-census", description="ask for a census")
    def _request_census(self, run_id: str, run_dir: Path) -> None:
        try:
            request_census(run_dir)
        except OSError as err:
            self.call_from_thread(self.notify, f"Could not ask {run_id} for a census: {err}", severity="error")
            return
        self.call_from_thread(self._census_requested, run_id)

    def _census_requested(self, run_id: str) -> None:
        self.notify(f"Asked {run_id} for a tensor census (two, {DEFAULT_GAP} steps apart)", timeout=4)
        self.doctor_view.census_asked(run_id)
