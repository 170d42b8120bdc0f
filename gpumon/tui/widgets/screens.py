"""Modal screens: confirmation (signals, stopping runs) and help."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gpumon.core.model import GpuProcess


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no question; y/enter confirms, n/escape cancels."""

    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question, id="question")
            with Horizontal(id="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class HelpScreen(ModalScreen[None]):
    """Every key, as the app and its views declare them (keys.help_text)."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "close")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Static(self.text)
            yield Static("[dim]escape or ? closes[/dim]")

    def action_close(self) -> None:
        self.dismiss(None)


def ask_signal(app: App[None], proc: GpuProcess, name: str, send: Callable[[], None], where: str = "") -> None:
    """'Send SIGTERM to PID 42[ on gpu2]?' with who runs it; ``send`` runs only on yes."""

    def answered(yes: bool | None) -> None:
        if yes:
            send()

    who = f"{proc.user or 'N/A'}: {proc.command or 'N/A'}"
    app.push_screen(ConfirmScreen(f"Send {name} to PID {proc.pid}{where}?\n{who}"), answered)
