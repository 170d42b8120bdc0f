"""Modal screens: confirmation (signals, stopping runs) and help."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


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


HELP = """\
[b]gpumon keys[/b]

[b]Views[/b]
  g, F2          GPUs: the live monitor
  r, F3          Runs: training runs started by gpumon
  t, F4          Trials: Ray Tune experiments (in the GPUs view: F4)
  d, F5          Doctor: a run's memory growth, failure and the fix

[b]GPUs[/b]
  0-9            select GPU by index
  ←/→  [ ]       previous / next GPU
  ↑/↓  j/k       move in the focused list (tab: GPU list / processes)

[b]Processes[/b] (RUN: the gpumon run a process belongs to)
  s              sort by the next column (or click a header)
  R (shift+r)    reverse the sort
  a              processes of all GPUs / of the selected GPU
  t              send SIGTERM to the selected process
  K (shift+k)    send SIGKILL to the selected process

[b]Runs[/b]
  ↑/↓            select a run (newest on top)
  n              new run: a form; enter launches, escape cancels
  x              stop the selected run: SIGTERM, SIGKILL after 10 s
  K (shift+k)    kill the selected run now (SIGKILL)
  l / L          next / previous log: rank 0, 1, …, torchrun's launcher
  d              the Doctor on the selected run (▲: its memory grows per step)

[b]Doctor[/b] (the selected run, else the newest; a live run refreshes)
  ↑/↓  pgup/pgdn scroll: memory trend per rank, what grows, failure, advice
  c              ask the live run for a tensor census: names what grows

[b]Trials[/b] (★: the best trial so far)
  ↑/↓            select a trial: its metric curve and error text
  e / E          next / previous experiment (or select it in the list)
  s / R          sort by the next column (or click a header) / reverse
  f              show all trials, then only RUNNING, ERROR, …
  m              the metric the curve shows
  x              stop the selected trial (at its next result)
  X (shift+x)    stop the whole search

[b]App[/b]
  ctrl+p         command palette
  ?              this help
  q, ctrl+q      quit

Signals, stop and kill ask first. Values that cannot be read show N/A.
With --readonly, no signal is ever sent, no run or trial is started or stopped
and no census is asked for.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "close", "close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Static(HELP)
            yield Static("[dim]escape or ? closes[/dim]")

    def action_close(self) -> None:
        self.dismiss(None)
