"""The app's views (GPUs, Runs, Trials, Doctor) and the tab strip that names them.

A view is a child of the app's ContentSwitcher plus the app actions that only
act while it shows. To add one: a ``View`` here, its widget in
``GpumonApp.compose`` (id = ``widget_id``) and its actions on the app.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.widget import Widget


@dataclass(frozen=True)
class View:
    name: str  # the view('...') action's parameter
    title: str  # shown in the tab strip and the footer
    widget_id: str  # the ContentSwitcher child that is this view
    keys: str  # default keys, e.g. "g,f2"
    actions: frozenset[str]  # app actions that act (and show in the footer) only in this view


GPU_ACTIONS = frozenset({"gpu", "select_gpu", "sort", "reverse", "toggle_all", "signal"})
RUN_ACTIONS = frozenset({"new_run", "stop_run", "log_rank"})
TRIAL_ACTIONS = frozenset(
    {"trial_sort", "trial_reverse", "trial_filter", "experiment", "trial_metric", "stop_trial", "stop_experiment"}
)

DOCTOR_ACTIONS = frozenset({"census"})

VIEWS: tuple[View, ...] = (
    View("gpus", "GPUs", "body", "g,f2", GPU_ACTIONS),
    View("runs", "Runs", "runs", "r,f3", RUN_ACTIONS),
    View("trials", "Trials", "trials", "t,f4", TRIAL_ACTIONS),
    View("doctor", "Doctor", "doctor", "d,f5", DOCTOR_ACTIONS),
)
VIEW_OF_ACTION = {action: view.name for view in VIEWS for action in view.actions}


def view_named(name: str) -> View:
    for view in VIEWS:
        if view.name == name:
            return view
    raise KeyError(f"no view {name!r}; views: {', '.join(v.name for v in VIEWS)}")


def view_bindings(names: tuple[str, ...] | None = None) -> list[Binding]:
    """The keys that switch to the views ``names`` (default all), in the registry's order."""
    return [
        Binding(v.keys, f"view('{v.name}')", v.title, id=f"view_{v.name}")
        for v in VIEWS
        if names is None or v.name in names
    ]


class ViewTabs(Widget):
    """One line of tabs: the current view highlighted; a click switches."""

    DEFAULT_CSS = "ViewTabs { width: auto; height: 1; }"

    def __init__(self, current: str, id: str | None = None) -> None:
        super().__init__(id=id)
        self.current = current
        self._spans: list[tuple[int, int, str]] = []

    def set_current(self, name: str) -> None:
        if name != self.current:
            self.current = name
            self.refresh()

    def _text(self) -> Text:
        text = Text()
        self._spans = []
        for view in VIEWS:
            start = len(text)
            label = f" {view.title} "
            text.append(label, style="bold reverse" if view.name == self.current else "dim")
            self._spans.append((start, len(text), view.name))
            text.append(" ")
        return text

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return len(self._text())

    def render(self) -> Text:
        return self._text()

    async def on_click(self, event: Click) -> None:
        for start, end, name in self._spans:
            if start <= event.x < end:
                await self.app.run_action(f"view('{name}')")
