"""What the GPUs view does to the selected process: signals (T, K, I, F9's list) and its nice value (F7, F8), each
asked first. The core acts (gpumon.core.signals, gpumon.core.priority); this only asks and says the outcome."""

from __future__ import annotations

import signal

from textual.widget import Widget

from gpumon.core.model import GpuProcess
from gpumon.core.priority import plan_renice, renice
from gpumon.core.signals import send_signal
from gpumon.tui.view import SIGNALS_OFF, Refuses
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ChoiceScreen, ConfirmScreen, ask_signal

# htop's F9 list, the signals a person sends to a training process, by number as htop shows them
KILL_MENU = [
    (sig.name, f"{int(sig):>2} {sig.name}")
    for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP, signal.SIGSTOP, signal.SIGCONT)
] + [(s.name, f"{int(s):>2} {s.name}") for s in (signal.SIGUSR1, signal.SIGUSR2)]

#: What --readonly turns off when a process would be reniced.
NICE_OFF = "renicing is off"


class ProcessActions(Refuses):
    """Mixed into the GPUs view: the actions of its signal and nice keys."""

    def _process(self) -> GpuProcess | None:
        """The selected GPU process, or None having said why there is none."""
        assert isinstance(self, Widget)
        table = self.query_one(ProcessTable)
        proc = table.selected()
        if proc is None:
            parent = table.tree_mode and table.selected_key() is not None  # a parent row of the tree
            what = "Select a GPU process, not a parent" if parent else "Select a process first"
            self.notify(f"{what} (tab to the process table)", severity="warning", markup=False)
        return proc

    def action_kill_menu(self) -> None:
        assert isinstance(self, Widget)
        if self.refused(SIGNALS_OFF) or self._process() is None:
            return

        def picked(name: str | None) -> None:
            if name is not None:
                self.action_signal(name)

        self.app.push_screen(ChoiceScreen("Send signal", KILL_MENU, "SIGTERM"), picked)

    def action_signal(self, name: str) -> None:
        assert isinstance(self, Widget)
        if self.refused(SIGNALS_OFF):
            return
        proc = self._process()
        if proc is None:
            return
        sig = signal.Signals[name]
        if proc.simulated:  # never signalled: say so now, not after a question whose answer changes nothing
            self.notify(send_signal(proc, sig).message, severity="warning", timeout=6, markup=False)
            return

        def send() -> None:
            outcome = send_signal(proc, sig)
            self.notify(outcome.message, severity="information" if outcome.ok else "error", timeout=6, markup=False)

        ask_signal(self.app, proc, name, send)

    def action_nice(self, step: int) -> None:
        """htop's F7 (``step`` -1: nice value down, higher priority) and F8 (+1: up, lower priority), asked first;
        what cannot be done (a simulated PID, the end of the range, another user's process) is said at once."""
        assert isinstance(self, Widget)
        if self.refused(NICE_OFF):
            return
        proc = self._process()
        if proc is None:
            return
        plan = plan_renice(proc, step)
        if plan.error is not None or plan.to is None:
            self.notify(plan.error or "nothing to change", severity="warning", timeout=8, markup=False)
            return
        to = plan.to

        def answered(yes: bool | None) -> None:
            if yes:
                outcome = renice(proc, to)
                self.notify(outcome.message, severity="information" if outcome.ok else "error", timeout=8, markup=False)

        who = f"{proc.user or 'N/A'}: {proc.command or 'N/A'}"
        question = f"Renice PID {proc.pid} from {plan.now} to {to} ({plan.direction})?\n{who}"
        self.app.push_screen(ConfirmScreen(question), answered)
