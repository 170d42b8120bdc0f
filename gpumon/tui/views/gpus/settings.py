"""F2, htop's Setup: the monitor's effective settings, where each comes from, and those that change live.

↑/↓ pick a setting, ←/→ (or -/+, enter, space) change it at once; the rest say where to change them (the command
line, config.toml, keymap.toml). Changes last for this session: htop's F2 writes its htoprc, but gpumon's
config.toml is the user's own file, with comments, and is never rewritten behind their back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from gpumon.core.config import config_path, keymap_path
from gpumon.core.sampler import MIN_INTERVAL, Sampler
from gpumon.tui.widgets.process_table import SORT_KEYS, ProcessTable

INTERVALS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)  # F2's steps for the refresh interval, in seconds


@dataclass
class Setting:
    """One row: its name, its value now (read each time it is drawn), where it comes from, and how to change it
    (``step(+1 or -1)``; None: it changes elsewhere, as ``source`` says)."""

    name: str
    value: Callable[[], str]
    source: str
    step: Callable[[int], None] | None = None


def next_interval(now: float, step: int) -> float:
    """The next step of ``INTERVALS`` above (``step`` 1) or below (-1) ``now``, kept at the ends."""
    if step > 0:
        return next((v for v in INTERVALS if v > now), max(now, INTERVALS[-1]))
    return next((v for v in reversed(INTERVALS) if v < now), max(MIN_INTERVAL, min(now, INTERVALS[0])))


def _file(path: os.PathLike[str] | str) -> str:
    return f"{path}" if os.path.exists(path) else f"{path} (not there: defaults)"


@dataclass
class Panels:
    """What F2 reads and toggles of the GPUs view, as its keys do (c, a)."""

    table: ProcessTable
    compact: Callable[[], bool]
    toggle_compact: Callable[[], None]
    toggle_all: Callable[[], None]


def gpus_settings(view: Panels, sampler: Sampler, readonly: bool, keymap: dict[str, str]) -> list[Setting]:
    """The GPUs view's settings, each with where it comes from; those that change live change at once."""
    table = view.table

    def interval(step: int) -> None:
        sampler.set_interval(next_interval(sampler.interval, step))

    def sort(step: int) -> None:
        keys = list(SORT_KEYS)
        table.sort_by(keys[(keys.index(table.sort_key) + step) % len(keys)] if table.sort_key in keys else keys[0])

    def toggle(action: Callable[[], None]) -> Callable[[int], None]:
        return lambda _step: action()

    remapped = f"{len(keymap)} key{'s' if len(keymap) != 1 else ''} remapped" if keymap else "no key remapped"
    return [
        Setting(
            "refresh interval",
            lambda: f"{sampler.interval:g} s",
            f"--interval S at start (min {MIN_INTERVAL:g}); here: this session",
            interval,
        ),
        Setting(
            "GPU panels",
            lambda: "compact (one line each)" if view.compact() else "full",
            "c in the GPUs view",
            toggle(view.toggle_compact),
        ),
        Setting(
            "processes of",
            lambda: "all GPUs" if table.show_all else "the selected GPU",
            "a in the GPUs view",
            toggle(view.toggle_all),
        ),
        Setting(
            "sort by",
            lambda: f"{table.sort_key} {'↓' if table.sort_reverse else '↑'}",
            "s, R, <, >, F6",
            sort,
        ),
        Setting("process tree", lambda: "on" if table.tree_mode else "off", "p, F5", toggle(table.toggle_tree)),
        Setting(
            "read-only",
            lambda: "yes: no signal, renice or run" if readonly else "no",
            "--readonly at start",
        ),
        Setting("config", lambda: _file(config_path()), "[fleet] [alerts] [runs] [queue] [slurm], read at start"),
        Setting("keymap", lambda: _file(keymap_path()), remapped),
    ]


class SettingsScreen(ModalScreen[None]):
    """The settings as rows; the highlighted one changes with ←/→."""

    BINDINGS = [
        Binding("up,k", "move(-1)", "up", show=False),
        Binding("down,j", "move(1)", "down", show=False),
        Binding("left,minus", "change(-1)", "less", show=False),
        Binding("right,plus,enter,space", "change(1)", "more", show=False),
        Binding("escape,f2,q", "close", "close"),
        Binding("f10", "app.quit", "quit"),
    ]

    def __init__(self, settings: list[Setting]) -> None:
        super().__init__()
        self.settings = settings
        self.row = 0

    def compose(self) -> ComposeResult:
        with Vertical(id="settings"):
            yield Static(Text("Setup (F2)", style="bold"), id="settings-title")
            yield Static(id="settings-rows")
            hint = "↑ ↓ pick · ← → change now · escape, F2 close"
            yield Static(Text(hint, style="dim"), id="settings-hint")

    def on_mount(self) -> None:
        self.draw()

    def text(self) -> Text:
        """A setting a line (name, value), where it comes from under it, dim; the paths are shown as they read."""
        width = max(len(s.name) for s in self.settings) + 2
        text = Text()
        for i, setting in enumerate(self.settings):
            here = i == self.row
            text.append(("▶ " if here else "  ") + setting.name.ljust(width), style="bold" if here else "")
            text.append(setting.value(), style="reverse" if here and setting.step else "cyan")
            text.append(("\n" + " " * (width + 2)) + ("← → or " if setting.step else "") + setting.source, "dim")
            text.append("\n" if i < len(self.settings) - 1 else "")
        return text

    def draw(self) -> None:
        self.query_one("#settings-rows", Static).update(self.text())

    def action_move(self, step: int) -> None:
        self.row = (self.row + step) % len(self.settings)
        self.draw()

    def action_change(self, step: int) -> None:
        setting = self.settings[self.row]
        if setting.step is None:
            self.notify(f"{setting.name}: {setting.source}", timeout=4, markup=False)
            return
        setting.step(step)
        self.draw()

    def action_close(self) -> None:
        self.dismiss(None)
