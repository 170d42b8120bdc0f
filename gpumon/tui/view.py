"""What every view is: a widget in the app's switcher that owns its keys, actions and refresh worker.

The app hands each view one ``AppContext`` (the feeds and the --readonly
policy); a view never reaches into another view.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from textual.widget import Widget

from gpumon.core.doctor.leak import LeakState
from gpumon.core.gpu.idle import HeldIdle
from gpumon.core.history import History
from gpumon.core.model import Snapshot
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.record.store import RunStore
from gpumon.tui.textual_private.nodes import key_bindings


@dataclass
class AppContext:
    """Shared by the app and its views; written by the app's feeds (and the Runs view's selection)."""

    readonly: bool = False
    store: RunStore | None = None  # None: the state dir, opened by the first worker that needs it
    snapshot: Snapshot | None = None  # the latest GPU/host sample
    runs: dict[str, RunSummary] = field(default_factory=dict)  # the latest run summaries
    selected_run: str | None = None  # the run selected in the Runs view
    selected_host: str | None = None  # that run's fleet host when it is another host's (None: this machine's)
    run_pids: dict[int, str] = field(default_factory=dict)  # PID -> run id of live gpumon runs
    run_ranks: dict[int, int] = field(default_factory=dict)  # PID -> rank, for the ranks among them
    run_leaks: dict[str, LeakState] = field(default_factory=dict)  # run id -> warning of live runs that warn
    run_idle: dict[int, HeldIdle] = field(default_factory=dict)  # PID -> a run's process holding an idle GPU
    fleet: Any = None  # the fleet (its state() -> FleetState) with --hosts or --ray; None: this machine


@dataclass(frozen=True)
class Command:
    """A command-palette entry a view offers."""

    title: str
    help: str
    callback: Any


#: What --readonly turns off when a process would be signalled (the GPUs view, a fleet host's screen).
SIGNALS_OFF = "signals are off"


#: The bindings (by id) whose actions --readonly refuses: they leave the footer, and pressed they still say why.
READONLY_OFF = frozenset(
    {
        "terminate", "kill", "interrupt", "nice_down", "nice_up",  # GPUs: signals, renice
        "remote_terminate", "remote_kill",  # a fleet host's screen: signals through ssh
        "new_run", "clone_run", "stop_run", "kill_run",  # Runs: launch, stop
        "stop_trial", "stop_experiment",  # Trials
        "census",  # Doctor
    }
)  # fmt: skip


class Refuses:
    """The --readonly refusal, in the same words in every view and screen that can act."""

    context: AppContext

    def on_mount(self) -> None:
        """--readonly: the keys of what it refuses are not offered in the footer (Textual calls each class's
        on_mount, so a view's own on_mount does not replace this one)."""
        if not self.context.readonly:
            return
        assert isinstance(self, Widget)
        own = key_bindings(self)
        if own is None:  # Textual's map moved: the keys show, and are refused when pressed
            return
        by_key = own.key_to_bindings
        for key, bindings in by_key.items():
            by_key[key] = [replace(b, show=False) if b.id in READONLY_OFF else b for b in bindings]
        self.refresh_bindings()

    def refused(self, what: str) -> bool:
        """True (and say so) when --readonly forbids ``what``."""
        if not self.context.readonly:
            return False
        assert isinstance(self, Widget)
        self.notify(f"Read-only mode (--readonly): {what}", severity="warning", markup=False)
        return True


class View(Refuses):
    """Mixed into a container widget. Bindings go in the view's BINDINGS: they act while focus is inside it."""

    NAME: ClassVar[str]  # the view('...') action's parameter
    TITLE: ClassVar[str]  # the tab strip, the footer, the help
    KEYS: ClassVar[str]  # the global keys that show it, e.g. "g,f2"
    HELP_NOTE: ClassVar[str] = ""  # a line beside its title in the help screen
    HELP_WIDGETS: ClassVar[tuple[type[Widget], ...]] = ()  # parts whose own keys the help lists too
    # full screens it opens (a log, a comparison): their keys act only there, so each is its own help section
    HELP_SCREENS: ClassVar[tuple[tuple[str, type[Any]], ...]] = ()  # (title, screen class)

    context: AppContext

    def showing(self) -> None:
        """The view is about to be drawn (its key's frame comes next): draw what it holds and has not drawn while
        hidden, so that the frame shows it (else a second frame follows). No reads here: ``shown`` reads."""

    def shown(self) -> None:
        """The view just became current: read now."""

    def hidden(self) -> None:
        """Another view just became current: a read or tick for this one only is paused until ``shown``."""

    def ahead(self) -> None:
        """Shortly after the start: a view that reads only while it shows reads once, so that its first showing
        draws what it holds (as every later one does) instead of waiting on a read."""

    def sample(self, snapshot: Snapshot, history: History) -> None:
        """A new GPU/host sample (each view, shown or not; the default ignores it)."""

    def runs_changed(self) -> None:
        """The runs feed changed the context's pid map or warnings."""

    def select_run(self, run_id: str) -> None:
        """Show ``run_id`` as the selected run (another view asked to open it; the Runs view does)."""

    def focus_first(self) -> None:
        """Put focus inside the view, so that its keys act."""
        target = self.focus_target()
        if target is not None:
            target.focus()

    def focus_target(self) -> Widget | None:
        """The widget ``focus_first`` focuses (the app also builds the footer's keys for it ahead)."""
        assert isinstance(self, Widget)
        for widget in self.query("*"):
            if widget.focusable:
                return widget
        return self if self.focusable else None

    def commands(self) -> Iterable[Command]:
        return ()
