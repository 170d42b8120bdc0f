"""The app's views, in tab order. Adding a view: a folder here with its View widget, and one line below."""

from __future__ import annotations

from gpumon.tui.view import View
from gpumon.tui.views.alerts.view import AlertsView
from gpumon.tui.views.doctor.view import DoctorView
from gpumon.tui.views.fleet.view import FleetView
from gpumon.tui.views.gpus.view import GpusView
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.views.trials.view import TrialsView

VIEWS: tuple[type[View], ...] = (GpusView, RunsView, TrialsView, DoctorView, FleetView, AlertsView)


def view_class(name: str) -> type[View]:
    for view in VIEWS:
        if name == view.NAME:
            return view
    raise KeyError(f"no view {name!r}; views: {', '.join(v.NAME for v in VIEWS)}")
