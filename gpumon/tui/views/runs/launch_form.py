"""The new-run form (n), or a run cloned into it (e): one labelled field per line, top to bottom.

Only the fields the kind uses show, so tab goes exactly through what the user sees. Enter launches from a
text field or the Launch button; on a list (kind, preset) it opens the list. The line under the program
says where a relative path leads (from the directory gpumon started in, or the cloned run's) and whether
it exists. The form checks everything the launcher would (``form_spec.build_spec``, the CLI's SpecError)
and shows the first mistake in one red line; only a valid spec leaves it. Launching itself happens in the
Runs view's thread worker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static

from gpumon.core.runs.record.spec import KINDS, RunSpec, SpecError, default_nproc
from gpumon.tui.textual_private.nodes import taken_down
from gpumon.tui.textual_private.select import FormSelect
from gpumon.tui.unseen import stopping
from gpumon.tui.views.runs.form_spec import (
    HOST_KINDS,
    PRESETS,
    TRAINER_KINDS,
    FormValues,
    GroupLaunch,
    QueuedLaunch,
    build_spec,
    hint_before_disk,
    hint_reads_disk,
    kept_options,
    parse_form_hosts,
    program_hint,
    spec_values,
    values_from_spec,
)
from gpumon.tui.widgets.screens import KeptScreen

__all__ = [
    "GroupLaunch",
    "LaunchForm",
    "QueuedLaunch",
    "build_spec",
    "parse_form_hosts",
]  # the form's parts, where tests look

# field -> (widget id, label); the order on screen and of tab
ROWS = {
    "kind": ("kind", "kind"),
    "preset": ("preset", "preset"),
    "program": ("script", "program"),
    "args": ("args", "arguments"),
    "nproc": ("nproc", "processes"),
    "gpus": ("gpus", "GPUs"),
    "hosts": ("hosts", "hosts"),
    "slurm": ("slurm", "Slurm job"),
    "queue": ("queue", "queue"),
    "name": ("name", "name"),
    "env": ("env", "env"),
    "max_restarts": ("max-restarts", "max restarts"),
    "on_alert": ("on-alert", "on alert"),
}
PLACEHOLDERS = {
    "args": "e.g. --epochs 1 --lr 0.1",
    "nproc": "processes per node",
    "hosts": "blank: here; gpu1,gpu2: a node on each (ssh)",
    "slurm": "blank: here; job, or --nodes 2 --time 4:00:00 …",
    "queue": "blank: now; queue, or --gpus 2 --gpu-mem 20G --after RUN …",
    "name": "blank: the program's name",
    "env": "NAME=VALUE …",
    "max_restarts": "0 (torchrun restarts after a failure)",
    "on_alert": "a command run with each alert's text, e.g. notify-send",
}
PROGRAM_LABEL = {"script": "script", "tune": "search"}
HELP = Text.assemble(
    ("enter", "bold"),
    " launches from a text field or Launch; on a list it opens the list\n",
    ("tab", "bold"),
    " / ",
    ("shift+tab", "bold"),
    ": next / previous field · ",
    ("escape", "bold"),
    ": cancel",
)


class HintRead(Message):
    """The line under the program, read in a thread for the (kind, program, cwd) it was asked for."""

    def __init__(self, asked: tuple[str, str, str], hint: Text) -> None:
        self.asked = asked
        self.hint = hint
        super().__init__()


class FormScroll(VerticalScroll, can_focus=False):
    """Scrolls to the focused field (at 80x24 all fit); tab never stops on the scroll itself."""


def shown_rows(kind: str) -> set[str]:
    """The fields a kind uses."""
    hidden = set()
    if kind not in TRAINER_KINDS:
        hidden.add("preset")
    if kind == "tune":
        hidden |= {"args", "nproc", "slurm", "queue"}  # a search takes no arguments; Ray places the trials
    if kind not in HOST_KINDS:
        hidden |= {"hosts", "max_restarts"}
    return set(ROWS) - hidden


@dataclass(frozen=True)
class Opening:
    """What the form opens with: a new run's defaults (``Opening()``), or a run cloned into it (``cloned``)."""

    cwd: str | None = None  # where relative paths lead (None: the directory gpumon started in)
    initial: FormValues | None = None  # the fields' values (None: a new run's)
    keep: RunSpec | None = None  # the cloned run, whose options the form has no field for
    title: str = "New run"
    note: str = ""  # a clone's: what it carries without a field, what it leaves


def cloned(spec: RunSpec, run_id: str) -> Opening:
    """The form's opening for a run cloned into it (paths from the directory it started in)."""
    notes = [f"kept from the run: {kept_options(spec)}"] if kept_options(spec) else []
    if spec.nnodes > 1:
        notes.append(f"a node of a {spec.nnodes}-node run: name the hosts to run on several again")
    return Opening(spec.cwd, values_from_spec(spec), spec, f"Clone of {run_id}", "\n".join(notes))


class LaunchForm(KeptScreen, ModalScreen[RunSpec | GroupLaunch | QueuedLaunch | None]):
    """Returns the spec to launch (a GroupLaunch with hosts, a QueuedLaunch for the queue), or None."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, visible_gpus: int, opening: Opening | None = None) -> None:
        super().__init__()
        self._error_values: FormValues | None = None
        self._mounted = False  # on_mount has filled the fields: fill() fills them from then on
        self._shown: dict[Static, object] = {}  # what _show last set each text to
        self.fill(visible_gpus, opening)

    def fill(self, visible_gpus: int, opening: Opening | None = None) -> None:
        """What the form opens with: a new run's defaults, or a run cloned into it. The form is built once
        and shown again (Launching keeps it): filled anew each time, its fields too once they exist."""
        opening = opening or Opening()
        self.visible_gpus = visible_gpus
        self.cwd = opening.cwd or os.getcwd()  # where relative paths lead: shown under the program
        self.initial = opening.initial or FormValues()
        self.keep = opening.keep
        self.title_text = opening.title
        self.note = opening.note
        self._nproc_default = str(default_nproc(self.initial.kind, self.initial.gpus or None, visible_gpus))
        if self._mounted:
            self._fill_fields()

    @classmethod
    def clone(cls, spec: RunSpec, run_id: str, visible_gpus: int) -> LaunchForm:
        """The form filled from a run's spec, resolving paths from the directory that run started in."""
        return cls(visible_gpus, cloned(spec, run_id))

    def compose(self) -> ComposeResult:
        start = self.initial
        widgets: dict[str, Widget] = {
            "kind": FormSelect([(k, k) for k in KINDS], value=start.kind, allow_blank=False, compact=True),
            "preset": FormSelect(
                [(p, p) for p in PRESETS], prompt="trainer default", value=start.preset or Select.NULL, compact=True
            ),
            **{
                field: Input(getattr(start, field), placeholder=PLACEHOLDERS.get(field, ""), compact=True)
                for field in ROWS
                if field not in ("kind", "preset")
            },
        }
        widgets["nproc"].value = start.nproc or self._nproc_default  # type: ignore[attr-defined]
        gpus = f"0-{self.visible_gpus - 1}; blank: all" if self.visible_gpus else "blank: CPU (no GPU here)"
        widgets["gpus"].placeholder = f"e.g. 0,1 ({gpus})"  # type: ignore[attr-defined]
        with FormScroll(id="launch-form"):
            for field, (widget_id, label) in ROWS.items():
                widget = widgets[field]
                widget.id = widget_id
                with Horizontal(classes="form-row", id=f"row-{widget_id}"):
                    yield Label(label, id=f"label-{widget_id}")
                    yield widget
                if field == "program":
                    yield Static("", id="program-hint")
            yield Static(Text(self.note, style="dim"), id="form-note")
            yield Static("", id="form-error")
            with Horizontal(id="form-buttons"):
                yield Button("Launch", variant="primary", id="launch", compact=True)
                yield Button("Cancel", id="cancel", compact=True)
            yield Static(HELP, id="form-help")

    def on_mount(self) -> None:
        if not self.query("#kind") or not self.app.screen_stack or stopping(self.app):  # built ahead as the app closed
            return
        self._mounted = True
        self._fill_fields()

    def _fill_fields(self) -> None:
        start = self.initial
        kind = self.query_one("#kind", Select)
        kind.expanded = False
        kind.value = start.kind
        self.query_one("#preset", Select).value = start.preset or Select.NULL
        for field, (widget_id, _label) in ROWS.items():
            if field not in ("kind", "preset", "nproc"):  # nproc set once to its value (a change is a layout)
                self.query_one(f"#{widget_id}", Input).value = getattr(start, field)
        self.query_one("#nproc", Input).value = start.nproc or self._nproc_default
        gpus = f"0-{self.visible_gpus - 1}; blank: all" if self.visible_gpus else "blank: CPU (no GPU here)"
        self.query_one("#gpus", Input).placeholder = f"e.g. 0,1 ({gpus})"
        form = self.query_one("#launch-form", FormScroll)
        form.border_title = self.title_text
        form.scroll_home(animate=False)
        note = self.query_one("#form-note", Static)
        self._show(note, Text(self.note, style="dim"))
        note.display = bool(self.note)
        self.show_error("")
        self._kind_changed(start.kind)
        kind.focus()

    # -- what shows ------------------------------------------------------------------
    def _show(self, widget: Static, content: Text | str) -> None:
        """``widget`` shows ``content``: a text already shown is not set again (each update asks for a layout of the
        form, and `n` filling the kept form with what it shows already laid the form out anew on the key's path)."""
        key = content if isinstance(content, str) else (content.plain, str(content.style), tuple(content.spans))
        if self._shown.get(widget) != key:  # (a Text equals another of other base style: compared whole here)
            self._shown[widget] = key
            widget.update(content)

    def kind(self) -> str:
        return str(self.query_one("#kind", Select).value)

    def _kind_changed(self, kind: str) -> None:
        shown = shown_rows(kind)
        for field, (widget_id, _label) in ROWS.items():
            self.query_one(f"#row-{widget_id}").display = field in shown
        self._show(self.query_one("#label-script", Label), PROGRAM_LABEL.get(kind, "program"))
        placeholder = {
            "script": "train.py or -m module",
            "tune": "a shipped search's name or a search file (.toml)",
        }.get(kind, "optional: train.py or -m module")
        self.query_one("#script", Input).placeholder = placeholder
        self._update_nproc_default()
        self._update_hint()

    def _update_hint(self) -> None:
        kind, text, box = self.kind(), self.query_one("#script", Input).value, self.query_one("#program-hint", Static)
        if hint_reads_disk(kind, text):
            self._show(box, hint_before_disk(kind, text, self.cwd))  # the verdict comes from the thread
            self._read_hint(kind, text, self.cwd)
        else:
            self._show(box, program_hint(kind, text, self.cwd))

    @work(thread=True, exclusive=True, group="form-hint", exit_on_error=False, description="program hint")
    def _read_hint(self, kind: str, text: str, cwd: str) -> None:
        self.post_message(HintRead((kind, text, cwd), program_hint(kind, text, cwd)))

    def on_hint_read(self, message: HintRead) -> None:
        if message.asked == (self.kind(), self.query_one("#script", Input).value, self.cwd):  # else: typed on
            self._show(self.query_one("#program-hint", Static), message.hint)

    def _update_nproc_default(self) -> None:
        """A processes value the user did not type follows the kind and the GPUs."""
        nproc = self.query_one("#nproc", Input)
        gpus = self.query_one("#gpus", Input).value.strip() or None
        new = str(default_nproc(self.kind(), gpus, self.visible_gpus))
        if nproc.value == self._nproc_default and new != nproc.value:
            nproc.value = new
        self._nproc_default = new

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """The focused field's label lights up: the user sees where typing goes."""
        for row in self.query(".form-row"):
            row.set_class(row in event.widget.ancestors, "-current")

    def _taken_down(self) -> bool:
        """The form (built ahead) filled just before the app began to stop: its fields are going as the messages
        of that filling come (unseen.py ``stopping``)."""
        return stopping(self.app) or taken_down(self) or not self.is_attached

    def on_select_changed(self, event: Select.Changed) -> None:
        try:
            if event.select.id == "kind":
                self._kind_changed(str(event.value))
            self._edited()
        except NoMatches:
            if not self._taken_down():
                raise

    def on_input_changed(self, event: Input.Changed) -> None:
        try:
            if event.input.id == "gpus":
                self._update_nproc_default()
            elif event.input.id == "script":
                self._update_hint()
            self._edited()
        except NoMatches:
            if not self._taken_down():
                raise

    # -- values and mistakes ------------------------------------------------------------
    def values(self) -> FormValues:
        """The fields as typed; a field the kind does not show counts as blank."""
        kind = self.kind()
        shown = shown_rows(kind)
        typed: dict[str, str] = {"kind": kind}
        for field, (widget_id, _label) in ROWS.items():
            if field == "kind":
                continue
            widget = self.query_one(f"#{widget_id}")
            if field not in shown:
                typed[field] = ""
            elif isinstance(widget, Select):
                typed[field] = "" if widget.is_blank() else str(widget.value)
            else:
                assert isinstance(widget, Input)
                typed[field] = widget.value
        return FormValues(**typed)

    def _edited(self) -> None:
        """An error stays until a value differs from the values it was about."""
        if self._error_values is not None and self.values() != self._error_values:
            self.show_error("")

    def show_error(self, message: str) -> None:
        error = self.query_one("#form-error", Static)
        self._show(error, Text(message))  # the message quotes what the user typed: never markup
        error.display = bool(message)
        self._error_values = self.values() if message else None
        if message:
            error.scroll_visible()

    # -- launching ---------------------------------------------------------------------
    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_launch()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "launch":
            self.action_launch()
        else:
            self.action_cancel()

    def action_launch(self) -> None:
        try:
            chosen = spec_values(self.values(), self.visible_gpus, self.cwd, self.keep)
        except SpecError as err:
            self.show_error(str(err))
            return
        self.dismiss(chosen)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def dismiss(self, result: RunSpec | GroupLaunch | QueuedLaunch | None = None) -> AwaitComplete:
        """Closed, the form is kept (Launching): no field of it keeps the focus (nor a blinking cursor)."""
        self.set_focus(None)
        return super().dismiss(result)
