"""The Trials view's app actions: sort, filter, pick the experiment and the chart's metric, stop with confirmation."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from textual.app import App, SystemCommand

from gpumon.core.runs.trials import ACTIVE
from gpumon.tui.screens import ConfirmScreen
from gpumon.tui.trials_view import TrialsView

READONLY = "Read-only mode (--readonly): no trial or experiment is stopped"


class TrialsActions(App[None]):
    """Mixed into GpumonApp; its bindings live there (s, R, f, e, E, m, x, X) and act only in the Trials view."""

    readonly: bool

    @property
    def trials_view(self) -> TrialsView:
        return self.query_one(TrialsView)

    def action_trial_sort(self) -> None:
        self.trials_view.table.cycle_sort()

    def action_trial_reverse(self) -> None:
        self.trials_view.table.reverse_sort()

    def action_trial_filter(self) -> None:
        view = self.trials_view
        status = view.table.cycle_filter()
        view.selection_changed(view.table.selected_id())  # the rows were rebuilt
        self.notify(f"Showing {status or 'all'} trials", timeout=2)

    def action_experiment(self, step: int) -> None:
        self.trials_view.cycle_experiment(step)

    def action_trial_metric(self) -> None:
        self.trials_view.cycle_metric()

    def action_stop_trial(self) -> None:
        if self.readonly:
            self.notify(READONLY, severity="warning")
            return
        view = self.trials_view
        snap, row = view.snapshot, view.selected()
        if snap is None or row is None:
            self.notify("Select a trial first", severity="warning")
            return
        info = snap.info
        if not info.live or row.status not in ACTIVE:
            why = row.status if info.live else f"the search is {info.state}"
            self.notify(f"Trial {row.id} is not running ({why})", severity="warning", timeout=4)
            return
        question = f"Stop trial {row.id} of {info.run_id}?\nTune ends it at its next result; its results stay."
        self.push_screen(ConfirmScreen(question + _stopper_note(info.kind)), self._stop_answer(info.run_id, row.id))

    def action_stop_experiment(self) -> None:
        if self.readonly:
            self.notify(READONLY, severity="warning")
            return
        snap = self.trials_view.snapshot
        if snap is None:
            self.notify("No experiment selected", severity="warning")
            return
        info = snap.info
        if not info.live or info.ended:
            self.notify(f"{info.run_id} is not running ({info.state})", severity="warning", timeout=4)
            return
        question = (
            f"Stop the whole search {info.run_id}?\n"
            f"Its {info.running} running trial(s) end at their next result; no new trial starts."
        )
        self.push_screen(ConfirmScreen(question + _stopper_note(info.kind)), self._stop_answer(info.run_id, None))

    def _stop_answer(self, run_id: str, trial_id: str | None) -> Callable[[bool | None], None]:
        def answered(yes: bool | None) -> None:
            view = self.trials_view
            if yes and view.snapshot is not None and view.snapshot.info.run_id == run_id:
                view.request_stop(view.snapshot.info.run_dir, run_id, trial_id)

        return answered

    def trial_commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand(
            "Trials: stop the selected trial", "Ask Tune to end it at its next result (x)", self.action_stop_trial
        )
        yield SystemCommand(
            "Trials: stop the experiment", "Ask Tune to end every trial (X)", self.action_stop_experiment
        )
        yield SystemCommand("Trials: filter by status", "All, then each status in turn (f)", self.action_trial_filter)


def _stopper_note(kind: str) -> str:
    if kind == "tune":
        return ""
    return "\n(Only a search that passes gpumon's GpumonStopper to Tune reads this; x in Runs stops the whole run.)"
