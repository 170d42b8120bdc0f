"""Modal screens: confirmation (signals, stopping runs) and help; what a screen built once and kept needs."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option

from gpumon.core.model import GpuProcess
from gpumon.tui.keys import HelpSection, bound_keys, help_renderable, key_label, plain_help


class KeptScreen:
    """Mixed into a screen built once and pushed again and again (the help, the launch form).

    Textual restyles every widget of a screen each time it is pushed: 60 ms and more for the launch form's
    80 widgets on a busy machine, before anything is drawn. A kept screen keeps its styles unless the theme
    changed while it was away.
    """

    _restyle = False

    def on_mount(self) -> None:
        """Textual calls each class's on_mount: the screen's own is not replaced by this one."""
        assert isinstance(self, Screen)
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: object) -> None:
        self._restyle = True

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        """Runs before Screen's own handler, which restyles only when asked to."""
        event.refresh_styles = self._restyle
        self._restyle = False


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no question; y/enter confirms, n/escape cancels.

    The question quotes what is not ours (commands, run ids, host names): it is shown as it reads, and the
    dialog grows with its longest line (to 90% of the terminal) before it wraps, on words.
    """

    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Content(self.question), id="question")
            with Horizontal(id="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class ChoiceScreen(ModalScreen[str | None]):
    """A short list to pick from, as htop's F6 (sort by) and F9 (send signal): ↑ ↓ and enter pick, escape
    cancels. Each choice is (value, label); the labels are ours."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, choices: list[tuple[str, str]], current: str | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.choices = choices
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="choice"):
            yield Static(Text(self.title_text, style="bold"), id="choice-title")
            yield OptionList(*(Option(Text(label), id=value) for value, label in self.choices), id="choice-list")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        values = [value for value, _ in self.choices]
        options.highlighted = values.index(self.current) if self.current in values else 0
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(KeptScreen, ModalScreen[None]):
    """Every key, as the app and its views declare them (keys.help_sections), in a dialog that scrolls.

    Built once (the app keeps it): opened again it shows at once, from its top."""

    BINDINGS = [
        Binding("escape,q", "close", "close"),
        Binding("question_mark,f1", "close", "close", id="help"),  # the help key, as the keymap sets it
        Binding("f10", "app.quit", "quit"),  # as in htop (the app's own keys do not reach a modal screen)
    ]

    def __init__(self, sections: list[HelpSection], footnote: str) -> None:
        super().__init__()
        self.sections = sections
        self.footnote = footnote
        self.text = plain_help(sections, footnote)  # the same rows as plain lines (tests read them)

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            with VerticalScroll(id="help-body"):  # focused: the arrows, pgup/pgdn, home and end scroll it
                yield Static(help_renderable(self.sections, self.footnote), id="help-text")
            yield Static(Text(self.hint(), style="dim"), id="help-hint")

    def hint(self) -> str:
        keymap = getattr(self.app, "keymap", {})
        closers = " ".join(key_label(bound_keys(b, keymap)) for b in self.BINDINGS[:2] if isinstance(b, Binding))
        return f"↑ ↓ pgup pgdn home end: scroll · {closers}: close · F10: quit"

    def on_mount(self) -> None:
        for body in self.query("#help-body"):  # none: built ahead as the app closed (its widgets are gone)
            body.focus()

    def on_screen_resume(self) -> None:
        body = self.query_one("#help-body", VerticalScroll)
        body.scroll_home(animate=False)
        body.focus()

    def action_close(self) -> None:
        self.dismiss(None)


def ask_signal(app: App[None], proc: GpuProcess, name: str, send: Callable[[], None], where: str = "") -> None:
    """'Send SIGTERM to PID 42[ on gpu2]?' with who runs it; ``send`` runs only on yes."""

    def answered(yes: bool | None) -> None:
        if yes:
            send()

    who = f"{proc.user or 'N/A'}: {proc.command or 'N/A'}"
    app.push_screen(ConfirmScreen(f"Send {name} to PID {proc.pid}{where}?\n{who}"), answered)
