"""Other hosts' runs in the Runs view: the rows of each fleet host's ``gpumon runs --json`` (HostState.runs).

Each row is keyed ``HOST:RUN`` in the table; a host whose runs cannot be read is one line, keyed ``HOST:``.
Everything about a remote run is asked of the host's own gpumon through ssh: its log, followed through
one ssh while it is selected (remote_log.py), and stop/kill in thread workers (core/fleet/remote_runs.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widget import Widget

from gpumon.core.fleet.hosts import Host
from gpumon.core.fleet.model import FleetState, HostState
from gpumon.core.fleet.remote_runs import stop_remote
from gpumon.core.format import duration, size
from gpumon.core.format import loss as loss_text
from gpumon.core.runs.record.store import LIVE_STATES
from gpumon.core.runs.record.values import metric_value
from gpumon.tui.views.runs.reading import RunActionDone
from gpumon.tui.views.runs.remote_log import LogFollower
from gpumon.tui.widgets.render import STATE_STYLE
from gpumon.tui.widgets.screens import ConfirmScreen

LOCAL = "local"  # the HOST of this machine's runs when the fleet has no host of its own for it


@dataclass(frozen=True, eq=True)
class RemoteRun:
    """One row of a host's ``gpumon runs --json``."""

    host: Host
    row: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.row.get("id", "?"))

    @property
    def key(self) -> str:
        return f"{self.host.name}:{self.id}"

    @property
    def state(self) -> str:
        return str(self.row.get("status") or "unknown")

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def elapsed(self, now: float | None = None) -> float | None:
        started, ended = self.row.get("started"), self.row.get("ended")
        if not isinstance(started, (int, float)):
            return None
        end = ended if isinstance(ended, (int, float)) else (now or time.time())
        return max(0.0, end - started)  # the host's clock against ours while live: as good as NTP

    def program(self) -> str:
        label = str(self.row.get("program") or self.row.get("kind") or "?")
        if self.row.get("group"):
            return f"n{self.row.get('node_rank')}/{self.row.get('nnodes')} {label}"
        return label


@dataclass(frozen=True)
class HostNote:
    """Why a host's runs are not shown (or may be old): its link is down, or ``gpumon runs`` failed there."""

    host: Host
    text: str

    @property
    def key(self) -> str:
        return f"{self.host.name}:"


Remote = tuple[list[RemoteRun], list[HostNote]]


def host_note(state: HostState) -> HostNote | None:
    if state.link == "down":
        return HostNote(state.host, f"down: {state.reason or 'unreachable'}")
    if state.runs_reason:
        return HostNote(state.host, f"runs not read: {state.runs_reason}")
    return None


def remote_listing(fleet: FleetState, query: str = "") -> Remote:
    """Every other host's runs (``local`` is the view's own) and a note per host that cannot be read."""
    runs: list[RemoteRun] = []
    notes: list[HostNote] = []
    words = query.lower().split()
    for state in fleet.hosts:
        if state.host.local:
            continue
        note = host_note(state)
        if note is not None:
            notes.append(note)
        for row in state.runs:
            run = RemoteRun(state.host, row)
            text = f"{state.host.name} {run.id} {row.get('kind')} {run.state} {run.program()}".lower()
            if all(word in text for word in words):
                runs.append(run)
    return runs, notes


def local_name(fleet: FleetState) -> str:
    """What the HOST column calls this machine: the fleet's own name for it, else ``local``."""
    return next((h.host.name for h in fleet.hosts if h.host.local), LOCAL)


def remote_info(run: RemoteRun) -> Text:
    """The detail's lines for a remote run: what its host's ``gpumon runs --json`` says of it."""
    row = run.row
    line = Text.assemble((run.id, "bold"), " · ", (run.state, STATE_STYLE.get(run.state, "")), f" on {run.host.name}")
    if row.get("exit_code") is not None:
        line.append(f" (exit {row['exit_code']})")
    line.append(f" · {duration(run.elapsed())} · ")
    line.append(run.program(), style="bold")
    line.append(f" · {row.get('nproc', '?')} proc")
    if row.get("gpus") is not None:
        line.append(f" · GPUs {row['gpus']}")
    if row.get("step") is not None:
        loss = metric_value(row.get("loss"))  # "nan"/"inf" in JSON: shown as such, in the warning style
        line.append(f" · step {row['step']}")
        if isinstance(row.get("total_steps"), int):
            line.append(f"/{row['total_steps']}")
        line.append(" · loss ")
        line.append(loss_text(loss), style="bold red" if loss is not None and not math.isfinite(loss) else "")
    if row.get("memory_bytes") is not None:
        line.append(f" · memory {size(row['memory_bytes'])} {row.get('memory_kind') or ''}".rstrip())
    error = row.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    if message:
        line.append(f"\n✗ {str(message).strip().splitlines()[0]}", style="red")
    for alert in list(row.get("alerts") or [])[-2:]:
        line.append(f"\n• {alert}", style="dim")
    line.append(f"\nread on {run.host.name} through ssh · d: its doctor · T/K: stop/kill there", style="dim")
    return line


class RemoteRuns:
    """The Runs view's part for other hosts' runs: the listing, the selected run's log, stop and kill."""

    def __init__(self, view: Widget, fleet: Any) -> None:
        """``view``: the Runs view (its workers, messages and notifications); ``fleet``: a FleetMonitor or None."""
        self.view = view
        self.fleet = fleet
        self.runs: dict[str, RemoteRun] = {}
        self._hosts: tuple[HostState, ...] | None = None  # the fleet's states last listed
        self.log = LogFollower(view, fleet, self.get)

    def listing(self, query: str) -> Remote | None:
        """The remote rows and notes for the table (None without a fleet: no HOST column)."""
        if self.fleet is None:
            return None
        state = self.fleet.state()
        self._hosts = state.hosts
        runs, notes = remote_listing(state, query)
        self.runs = {run.key: run for run in runs}
        return runs, notes

    def changed(self) -> bool:
        """The table needs drawing again: a host's state changed, or a remote run is live (its time moves)."""
        if self.fleet is None:
            return False
        hosts = self.fleet.state().hosts
        same = self._hosts is not None and len(hosts) == len(self._hosts)
        same = same and all(a is b for a, b in zip(hosts, self._hosts or (), strict=False))
        return not same or any(run.live for run in self.runs.values())

    def local_name(self) -> str:
        return local_name(self.fleet.state()) if self.fleet is not None else LOCAL

    def get(self, key: str | None) -> RemoteRun | None:
        return self.runs.get(key or "")

    def note(self, key: str | None) -> HostNote | None:
        if self.fleet is None or not key or not key.endswith(":"):
            return None
        for state in self.fleet.state().hosts:
            if f"{state.host.name}:" == key:
                return host_note(state) or HostNote(state.host, "its runs are read again")
        return None

    # -- the selected run's log ------------------------------------------------------
    def follow_log(self, key: str | None) -> None:
        """Follow the log of the run keyed ``key`` if it is another host's, and while the view shows; else none."""
        self.log.want(key if self.fleet is not None and self.view.display else None)

    # -- stop and kill ---------------------------------------------------------------
    def ask_stop(self, run: RemoteRun, kill: bool) -> None:
        """Confirm, then ``gpumon stop RUN [--kill]`` on the run's host in a worker."""
        if not run.live:
            self.view.notify(
                f"{run.id} is not running on {run.host.name} ({run.state})", severity="warning", markup=False
            )
            return
        what = "SIGKILL now" if kill else "SIGTERM, SIGKILL after 10 s"
        question = f"{'Kill' if kill else 'Stop'} run {run.id} on {run.host.name}?\n{what}, through ssh."

        def answered(yes: bool | None) -> None:
            if yes:
                self.view.run_worker(
                    lambda: self._stop(run, kill), thread=True, group="runs-action", exit_on_error=False
                )

        self.view.app.push_screen(ConfirmScreen(question), answered)

    def _stop(self, run: RemoteRun, kill: bool) -> None:
        outcome = stop_remote(self.fleet.ssh, run.host, self.fleet.gpumon, run.id, kill)
        self.fleet.refresh_runs(run.host.name)
        self.view.post_message(RunActionDone(outcome.message, "information" if outcome.ok else "error"))
