"""The keys that work in every view, and the help built from every view's keys (the help screen, the
keymap's check), and the command palette's lines. Imported by the app; the views never import it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from textual.app import SystemCommand
from textual.binding import Binding, BindingType

from gpumon.tui.keys import clashes
from gpumon.tui.views import VIEWS

FOOTNOTE = """\
Signals (T, K, I), renice (F7, F8), stop and kill ask first. Values that cannot be read show N/A.
With --readonly, no signal is ever sent, no run or trial is started or stopped and no census is asked for.
Remap any key in ~/.config/gpumon/keymap.toml: [keymap] then binding_id = "key" (ids: README, Keys)."""

GLOBAL_BINDINGS: list[BindingType] = [
    Binding("q,f10", "quit", "quit", id="quit", tooltip="quit (ctrl+q too)"),  # F1, F10: as in htop
    Binding("question_mark,f1", "help", "help", id="help", tooltip="every key (this screen)"),
    *(Binding(v.KEYS, f"view('{v.NAME}')", v.TITLE, id=f"view_{v.NAME}", tooltip=f"the {v.TITLE} view") for v in VIEWS),
]


def help_sections() -> list[tuple[str, str, list[BindingType]]]:
    """(title, note, bindings): the global keys, then each view's with its parts'."""
    sections = [("Views and the app", "", GLOBAL_BINDINGS)]
    for view in VIEWS:
        owners = (view, *view.HELP_WIDGETS)
        sections.append((view.TITLE, view.HELP_NOTE, [b for w in owners for b in w.BINDINGS]))  # type: ignore[attr-defined]
        sections += [(title, "", list(screen.BINDINGS)) for title, screen in view.HELP_SCREENS]
    return sections


def keymap_problems(keymap: dict[str, str]) -> list[str]:
    """The user's keymap checked against every view's keys (empty: fine)."""
    return clashes(help_sections(), keymap)


def palette_commands(app: Any) -> Iterator[SystemCommand]:
    """The command palette's own lines: the help, each view, and each view's commands (shown in its view)."""
    yield SystemCommand("Help", "All keys of gpumon", app.action_help)
    for cls in VIEWS:
        keys = cls.KEYS.replace(",", " / ")
        yield SystemCommand(f"View: {cls.TITLE}", f"Show the {cls.TITLE} view ({keys})", _shower(app, cls.NAME))
    for cls in VIEWS:
        for command in app.view_widget(cls.NAME).commands():
            yield SystemCommand(command.title, command.help, _shower(app, cls.NAME, command.callback))


def _shower(app: Any, name: str, then: Callable[[], object] | None = None) -> Callable[[], None]:
    """Show view ``name``, then run ``then``: a view's command acts where its keys would."""

    def run() -> None:
        app.show_view(name)
        if then is not None:
            then()

    return run
