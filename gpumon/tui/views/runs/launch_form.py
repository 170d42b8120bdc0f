"""The new-run form: kind, preset, script (or search file), processes, GPUs, extra args; Enter anywhere launches.

The form checks everything the launcher would (``build_spec``) and shows the
first mistake in one red line; only a valid spec leaves it. Launching itself
happens in the Runs view's thread worker.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Select, Static

from gpumon.core.fleet.hosts import Host, HostError, parse_hosts
from gpumon.core.runs.spec import KINDS, RunSpec, SpecError, default_nproc, parse_gpus, parse_int, validate

PRESETS = ("tiny", "small", "medium", "resnet50")  # the trainers' --preset choices (trainers/model.py)
DEFAULT_KIND = "ddp"


def build_spec(
    kind: str,
    preset: str | None,
    script: str,
    nproc: str,
    gpus: str,
    extra: str,
    visible: int,
    cwd: str | None = None,
) -> RunSpec:
    """The RunSpec the form describes, validated; SpecError names the first mistake."""
    gpu_ids = parse_gpus(gpus, visible)
    count = parse_int(nproc, "processes", 1) if nproc.strip() else default_nproc(kind, gpu_ids, visible)
    try:
        args = shlex.split(extra)
    except ValueError as err:
        raise SpecError(f"extra args: {err}") from None
    program: str | None = None
    if kind == "tune":
        return _search_spec(script, args, gpu_ids, visible, cwd or os.getcwd())
    if kind == "script":
        text = script.strip()
        program = (text if text.startswith("-m ") else os.path.expanduser(text)) if text else None
    elif preset:
        args = ["--preset", preset, *args]
    spec = RunSpec(kind=kind, program=program, args=tuple(args), nproc=count, gpus=gpu_ids, cwd=cwd or os.getcwd())
    return validate(spec, visible)


def _search_spec(path: str, args: list[str], gpus: str | None, visible: int, cwd: str) -> RunSpec:
    if not path.strip():
        raise SpecError("tune needs a search file in the script field, e.g. trainers/searches/digits-asha.toml")
    if args:
        raise SpecError("extra args: a search takes none (fixed values go in its [space])")
    search = os.path.expanduser(path.strip())
    return validate(RunSpec(kind="tune", search=search, gpus=gpus, cwd=cwd), visible)  # named by its file


@dataclass(frozen=True)
class GroupLaunch:
    """A multi-node run: the spec of each node, and the hosts (node 0 on the first)."""

    spec: RunSpec
    hosts: tuple[Host, ...]


def parse_form_hosts(kind: str, text: str) -> tuple[Host, ...]:
    """The hosts field: blank for this machine, else a comma list (ssh), checked like ``--hosts``."""
    if not text.strip():
        return ()
    if kind not in ("ddp", "pipeline", "script"):
        raise SpecError(f"hosts: {kind} runs on one node; leave hosts blank (or choose ddp, pipeline or script)")
    try:
        hosts = tuple(parse_hosts(text))
    except HostError as err:
        raise SpecError(f"hosts: {err}") from None
    if len(hosts) < 2:
        raise SpecError("hosts: name two hosts or more, e.g. gpu1,gpu2 (blank: this machine)")
    return hosts


class LaunchForm(ModalScreen[RunSpec | GroupLaunch | None]):
    """Returns the spec to launch (or a GroupLaunch with hosts), or None when cancelled."""

    BINDINGS = [
        Binding("enter", "launch", "launch", priority=True),  # also from a Select or an Input
        Binding("escape", "cancel", "cancel"),
    ]

    def __init__(self, visible_gpus: int, cwd: str | None = None) -> None:
        super().__init__()
        self.visible_gpus = visible_gpus
        self.cwd = cwd
        self._nproc_default = str(default_nproc(DEFAULT_KIND, None, visible_gpus))
        self._error_values: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        gpu_hint = f"0-{self.visible_gpus - 1}; blank: all" if self.visible_gpus else "blank: CPU (no GPU here)"
        with Vertical(id="launch-form"):
            with Grid(id="form-grid"):
                yield Label("kind")
                yield Select([(k, k) for k in KINDS], value=DEFAULT_KIND, allow_blank=False, id="kind", compact=True)
                yield Label("preset")
                yield Select([(p, p) for p in PRESETS], prompt="trainer default", id="preset", compact=True)
                yield Label("script")
                yield Input(placeholder="train.py, -m module, or a search file (kind tune)", id="script", compact=True)
                yield Label("processes")
                yield Input(self._nproc_default, placeholder="processes per node", id="nproc", compact=True)
                yield Label("GPUs")
                yield Input(placeholder=f"e.g. 0,1 ({gpu_hint})", id="gpus", compact=True)
                yield Label("extra args")
                yield Input(placeholder="--epochs 1 --lr 0.1", id="args", compact=True)
                yield Label("hosts")
                yield Input(placeholder="blank: here; gpu1,gpu2: a node on each (ssh)", id="hosts", compact=True)
            yield Static("", id="form-error")
            yield Static("[b]enter[/b] launch  [b]escape[/b] cancel  [b]tab[/b] next field", id="form-help")

    def on_mount(self) -> None:
        self.query_one("#launch-form").border_title = "New run"
        self._kind_changed(DEFAULT_KIND)
        self.query_one("#kind", Select).focus()

    def _kind_changed(self, kind: str) -> None:
        self.query_one("#script", Input).disabled = kind not in ("script", "tune")
        self.query_one("#preset", Select).disabled = kind in ("script", "tune")
        self.query_one("#nproc", Input).disabled = kind == "tune"  # Ray places the trials
        self._update_nproc_default()

    def _update_nproc_default(self) -> None:
        """A processes value the user did not type follows the kind and the GPUs."""
        nproc = self.query_one("#nproc", Input)
        gpus = self.query_one("#gpus", Input).value.strip() or None
        new = str(default_nproc(str(self.query_one("#kind", Select).value), gpus, self.visible_gpus))
        if nproc.value == self._nproc_default and new != nproc.value:
            nproc.value = new
        self._nproc_default = new

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "kind":
            self._kind_changed(str(event.value))
        self._edited()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "gpus":
            self._update_nproc_default()
        self._edited()

    def _values(self) -> tuple[object, ...]:
        return tuple(w.value for w in self.query("#form-grid Input, #form-grid Select"))  # type: ignore[attr-defined]

    def _edited(self) -> None:
        """An error stays until a value differs from the values it was about."""
        if self._error_values is not None and self._values() != self._error_values:
            self.show_error("")

    def show_error(self, message: str) -> None:
        error = self.query_one("#form-error", Static)
        error.update(Text(message))  # literal: it quotes paths and pip extras ('.[train]')
        error.display = bool(message)
        self._error_values = self._values() if message else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Enter picks the option in an open list
        return not (action == "launch" and any(select.expanded for select in self.query(Select)))

    def action_launch(self) -> None:
        preset = self.query_one("#preset", Select).value
        kind = str(self.query_one("#kind", Select).value)
        try:
            hosts = parse_form_hosts(kind, self.query_one("#hosts", Input).value)
            spec = build_spec(
                kind=kind,
                preset=preset if isinstance(preset, str) else None,
                script=self.query_one("#script", Input).value,
                nproc=self.query_one("#nproc", Input).value,
                gpus=self.query_one("#gpus", Input).value,
                extra=self.query_one("#args", Input).value,
                visible=self.visible_gpus,
                cwd=self.cwd,
            )
        except SpecError as err:
            self.show_error(str(err))
            return
        self.dismiss(GroupLaunch(spec, hosts) if hosts else spec)

    def action_cancel(self) -> None:
        self.dismiss(None)
