"""The selected run's full command line in its detail: what the supervisor started (command.json), literal and
wrapped, with the user's environment and the directory it ran in."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.text import Text
from textual import work
from textual.message import Message
from textual.widgets import Static

from gpumon.core.placement.places import command as build_command
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import read_json
from gpumon.core.visible import visible


def command_text(command: dict[str, object], spec: RunSpec, run_id: str) -> Text:
    """'$ NAME=VALUE python -m torch.distributed.run … · in /dir': every argument, nothing read as markup.

    Without command.json (a run recorded before it existed) the command is the one its spec makes, with
    ``python`` for the interpreter.
    """
    argv = command.get("argv")
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        argv = ["python", *build_command(spec, run_id)[1:]]
    cwd = command.get("cwd") if isinstance(command.get("cwd"), str) else spec.cwd
    line = Text("$ ", style="dim")
    for key, value in spec.env:  # the user's own; gpumon's (PYTHONPATH, GPUMON_*) are not the user's command
        line.append(visible(shlex.quote(f"{key}={value}")) + " ", style="cyan")
    line.append(visible(shlex.join(argv)))  # its arguments may hold escapes or newlines: shown, one line
    line.append(f" · in {visible(str(cwd))}", style="dim")
    return line


class CommandRead(Message):
    def __init__(self, run_id: str, text: Text) -> None:
        self.run_id = run_id
        self.text = text
        super().__init__()


class RunCommand(Static):
    """Read once per selected run, on a thread (command.json never changes after the launch)."""

    def __init__(self) -> None:
        super().__init__("", id="run-command")
        self.run_id: str | None = None

    def show(self, summary: RunSummary | None) -> None:
        self.display = summary is not None
        if summary is None or summary.id == self.run_id:
            return
        self.run_id = summary.id
        self.update("")
        self._read(summary.record.dir, summary.record.spec, summary.id)

    def hide(self) -> None:
        self.display = False
        self.run_id = None

    @work(thread=True, exclusive=True, exit_on_error=False, group="run-command", description="read command.json")
    def _read(self, run_dir: Path, spec: RunSpec, run_id: str) -> None:
        self.post_message(CommandRead(run_id, command_text(read_json(run_dir / "command.json"), spec, run_id)))

    def on_command_read(self, message: CommandRead) -> None:
        message.stop()
        if message.run_id == self.run_id:
            self.update(message.text)
