"""The Runs view's launching and stopping: n (the form), e (clone), T/K (stop, kill), each in a thread worker.

A mixin of ``RunsView``, so its actions resolve from the view's own bindings; the attributes below are
the view's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work
from textual.notifications import SeverityLevel
from textual.widget import Widget

from gpumon.core.gpu import visible_gpu_count
from gpumon.core.placement.base import Launch
from gpumon.core.placement.places import Hosts, Queued, launch, stop
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.record.spec import RunSpec, SpecError
from gpumon.core.runs.record.store import RunRecord, RunStore
from gpumon.tui.heap import keep_built
from gpumon.tui.textual_private.nodes import mounted_screen
from gpumon.tui.unseen import stopping
from gpumon.tui.view import AppContext
from gpumon.tui.views.runs.reading import RunActionDone, stop_question
from gpumon.tui.views.runs.remote import RemoteRuns
from gpumon.tui.views.runs.run_table import RunTable
from gpumon.tui.widgets.screens import ConfirmScreen

if TYPE_CHECKING:
    from gpumon.tui.views.runs.launch_form import GroupLaunch, Opening, QueuedLaunch

READONLY = "no runs are started or stopped"
FORM = "launch-form"  # the launch form's name among the app's installed screens


class Launching(Widget):
    context: AppContext
    store: RunStore | None
    visible_gpus: int | None
    remote: RemoteRuns
    selected_id: str | None
    _select_next: str | None

    if TYPE_CHECKING:  # the view's own

        def selected(self) -> RunSummary | None: ...
        def poll(self) -> None: ...
        def refused(self, what: str) -> bool: ...
        def ask_cancel(self, summary: RunSummary) -> None: ...

    # -- launch and stop --------------------------------------------------------------
    @work(thread=True, exit_on_error=False, group="runs-action")
    def launch(self, spec: RunSpec) -> None:
        try:
            self.store = self.store or RunStore()
            visible = self.visible_gpus if self.visible_gpus is not None else visible_gpu_count()
            record = launch(spec, self.store, visible)
        except SpecError as err:
            self.post_message(RunActionDone(str(err), "error"))
            return
        except OSError as err:
            self.post_message(RunActionDone(f"Could not start the run: {err}", "error"))
            return
        if record.state in ("failed", "lost"):
            text = f"{record.id} ended at once ({record.state}): see its log"
            self.post_message(RunActionDone(text, "warning", select=record.id))
        else:
            self.post_message(RunActionDone(f"Started {record.id}", "information", select=record.id))

    @work(thread=True, exit_on_error=False, group="runs-action")
    def stop(self, record: RunRecord, kill: bool) -> None:
        severity: SeverityLevel = "information"
        try:
            text = stop(record, kill=kill)
        except PermissionError:
            text, severity = f"Permission denied stopping {record.id}: run gpumon as the user who started it", "error"
        except OSError as err:
            text, severity = f"Could not stop {record.id}: {err}", "error"
        self.post_message(RunActionDone(text, severity))

    def on_run_action_done(self, message: RunActionDone) -> None:
        self.notify(message.text, severity=message.severity, timeout=6, markup=False)
        if message.select is not None:
            self._select_next = message.select
            self.query_one(RunTable).focus()
        self.poll()

    # -- actions (keys in BINDINGS) -------------------------------------------------
    def action_new_run(self) -> None:
        if self.refused(READONLY):
            return
        self.open_form()

    def open_form(self, opening: Opening | None = None) -> None:
        """Show the launch form, filled with ``opening`` (None: a new run's defaults).

        The form is built once and kept (installed): opened again it is filled anew, not composed, so the
        key that opens it draws it at once and the keys typed after it find it there."""
        from gpumon.tui.views.runs.launch_form import LaunchForm

        visible = self.visible_gpus if self.visible_gpus is not None else visible_gpu_count()  # the first second only
        try:
            form = self.app.get_screen(FORM, LaunchForm)
        except KeyError:
            form = LaunchForm(visible, opening)
            self.app.install_screen(form, FORM)
        else:
            if form in self.app.screen_stack:  # open already (a command from the palette over it)
                return
            form.fill(visible, opening)
        self.app.push_screen(form, self._launch)

    def prepare_form(self) -> None:
        """Build the launch form ahead, once (the app calls this shortly after it starts): ``n`` then only
        fills it and shows it. It composes in its own task, while no key waits on it."""
        from gpumon.tui.views.runs.launch_form import LaunchForm

        if self.context.readonly or stopping(self.app) or self.app.is_screen_installed(FORM):
            return
        form = LaunchForm(self.visible_gpus or 0)
        self.app.install_screen(form, FORM)  # filled anew at each opening
        mounted_screen(self.app, FORM)  # Textual's own first step of push_screen: register, compose, mount
        keep_built(form)

    def _launch(self, spec: RunSpec | GroupLaunch | QueuedLaunch | None) -> None:
        from gpumon.tui.views.runs.launch_form import GroupLaunch, QueuedLaunch

        if isinstance(spec, GroupLaunch):
            self.launch_group(spec)
        elif isinstance(spec, QueuedLaunch):
            self.queue_run(spec)
        elif spec is not None:
            self.launch(spec)

    @work(thread=True, exit_on_error=False, group="runs-action")
    def queue_run(self, request: QueuedLaunch) -> None:
        """Into this host's queue, as ``launch --queue`` does (a keeper starts it when its GPUs are free)."""
        try:
            self.store = self.store or RunStore()
            visible = self.visible_gpus if self.visible_gpus is not None else visible_gpu_count()
            gpus = request.fields.get("gpus")
            visible = max(visible, gpus if isinstance(gpus, int) else 0)  # the keeper checks them when it starts it
            record = Queued(**request.fields).launch(request.spec, Launch(self.store, visible))
        except (SpecError, OSError) as err:
            self.post_message(RunActionDone(f"Could not queue the run: {err}", "error"))
            return
        self.post_message(RunActionDone(f"Queued {record.id}", "information", select=record.id))

    @work(thread=True, exit_on_error=False, group="runs-action")
    def launch_group(self, request: GroupLaunch) -> None:
        """One node per host over the user's ssh ([fleet] ssh and gpumon, $GPUMON_SSH), as ``--hosts`` does."""
        from gpumon.core.nodes.group import GroupError

        try:  # each node checks the spec against its own GPUs
            group = Hosts(request.hosts).launch(request.spec, Launch(self.store or RunStore(), 0))
        except GroupError as err:
            self.post_message(RunActionDone(str(err), "error"))
            return
        nodes = ", ".join(f"{n.host} {n.run}" for n in group.nodes)
        self.post_message(RunActionDone(f"Started {group.id}: {nodes} (gpumon runs shows each node)", "information"))

    def action_stop_run(self, kill: bool) -> None:
        if self.refused(READONLY):
            return
        remote = self.remote.get(self.selected_id)
        if remote is not None:
            self.remote.ask_stop(remote, kill)
            return
        summary = self.selected()
        if summary is None:
            self.notify("Select a run first", severity="warning", markup=False)
            return
        if summary.state == "queued":
            self.ask_cancel(summary)
            return
        if not summary.record.live:
            self.notify(f"{summary.id} is not running ({summary.state})", severity="warning", timeout=4, markup=False)
            return
        record = summary.record

        def answered(yes: bool | None) -> None:
            if yes:
                self.stop(record, kill)

        self.app.push_screen(ConfirmScreen(stop_question(record, kill)), answered)

    # -- clone (e) ------------------------------------------------------------------
    def action_clone_run(self) -> None:
        if self.refused(READONLY):
            return
        if self.remote.get(self.selected_id) is not None:
            self.notify(
                "Another host's run: clone it in gpumon on that host", severity="warning", timeout=4, markup=False
            )
            return
        summary = self.selected()
        if summary is None:
            self.notify("Select a run first", severity="warning", markup=False)
            return
        from gpumon.tui.views.runs.launch_form import cloned

        self.open_form(cloned(summary.record.spec, summary.id))
