"""The Runs view's app actions: launch (form, then a worker), stop/kill with confirmation, cycle logs."""

from __future__ import annotations

from textual.app import App

from gpumon.core.runs.spec import RunSpec
from gpumon.tui.runs import RunsView
from gpumon.tui.screens import ConfirmScreen


class RunsActions(App[None]):
    """Mixed into GpumonApp; its bindings live there (n, x, K, l, L) and act only in the Runs view."""

    readonly: bool

    @property
    def runs_view(self) -> RunsView:
        return self.query_one(RunsView)

    def show_view(self, name: str) -> None:
        raise NotImplementedError

    def action_new_run(self) -> None:
        if self.readonly:
            self.notify("Read-only mode (--readonly): no runs are started or stopped", severity="warning")
            return
        from gpumon.tui.launch_form import LaunchForm

        self.show_view("runs")
        visible = self.runs_view.visible_gpus
        if visible is None:  # the runs worker has not answered yet
            from gpumon.core.gpu import visible_gpu_count

            visible = visible_gpu_count()
        self.push_screen(LaunchForm(visible), self._launch)

    def _launch(self, spec: RunSpec | None) -> None:
        if spec is not None:
            self.runs_view.launch(spec)

    def action_stop_run(self, kill: bool) -> None:
        if self.readonly:
            self.notify("Read-only mode (--readonly): no runs are started or stopped", severity="warning")
            return
        summary = self.runs_view.selected()
        if summary is None:
            self.notify("Select a run first", severity="warning")
            return
        if not summary.record.live:
            self.notify(f"{summary.id} is not running ({summary.state})", severity="warning", timeout=4)
            return
        record = summary.record
        if kill:
            question = f"Kill run {record.id} now?\nSIGKILL to all its processes ({record.spec.label()})."
        else:
            question = (
                f"Stop run {record.id}?\nSIGTERM to all its processes ({record.spec.label()}), SIGKILL after 10 s."
            )

        def answered(yes: bool | None) -> None:
            if yes:
                self.runs_view.stop(record, kill)

        self.push_screen(ConfirmScreen(question), answered)

    def action_log_rank(self, step: int) -> None:
        self.runs_view.cycle_log(step)
