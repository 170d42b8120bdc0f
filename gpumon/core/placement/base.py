"""Where a run lives, as one interface: this host, the GPU queue, a Slurm job, a node of a group over ssh.

A run's place is chosen once, at launch, from its spec, and stays recorded in the run: ``spec.json`` keeps
the job's options (a Slurm run) and the group (a node of several hosts), ``status.json`` the queue's state
and the job's id. ``record.name_of`` reads that record; it is the one function that knows how each place
is written down. Everything else asks the run's ``Placement`` (gpumon.core.placement.of_record) and never
names Slurm or the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpumon.core.placement.record import PlaceName as PlaceName
from gpumon.core.placement.record import elsewhere as elsewhere
from gpumon.core.placement.record import name_of as name_of
from gpumon.core.runs.supervision.launcher import STOP_GRACE_S

if TYPE_CHECKING:
    from gpumon.core.doctor.advice_types import Advice
    from gpumon.core.doctor.failures import Failure
    from gpumon.core.events import EventWriter
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunRecord, RunStore


@dataclass(frozen=True)
class Where:
    """Where a run's files are read: its directory holds the logs (``logs/``) and events (``events/``) in
    every place; ``host`` names the machine(s) that write them when not this one ("" here; a job: its node list)."""

    run_dir: Path
    host: str = ""

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    @property
    def events(self) -> Path:
        return self.run_dir / "events"


@dataclass(frozen=True)
class Launch:
    """What a launch is given besides the spec, the same in every place: the state dir's store, the GPUs this
    host sees (the spec is checked against them), how long to wait for the run's first word, and how long a
    stop waits before SIGKILL."""

    store: RunStore
    visible_gpus: int
    wait_s: float = 5.0
    grace_s: float = STOP_GRACE_S


class Placement(Protocol):
    """One place a run can live. The local place is the default every other one falls back to."""

    name: PlaceName
    supervised_here: bool  # its supervisor runs on this host (else: where its place put it, e.g. a job's node)
    row_keys: tuple[str, ...]  # the keys of this place that every row of ``gpumon runs --json`` has (None off it)

    def check(self, spec: RunSpec) -> None:
        """What this place cannot run, as a SpecError, before anything is written."""

    def command(self, spec: RunSpec, run_id: str) -> list[str]:
        """The argument list the run's supervisor starts (never a shell string)."""

    def launch(self, spec: RunSpec, how: Launch) -> RunRecord:
        """Validate, write the run directory and start the run here (or hand it to its place)."""

    def stop(self, record: RunRecord, kill: bool = False) -> str:
        """Stop it where it lives; a line for the user. Raises OSError when the place refuses."""

    def withdraw(self, record: RunRecord) -> str | None:
        """Take back a run that has not started (out of the queue): a line for the user; "" when it started
        meanwhile (then it is stopped like any run); None where runs never wait to start."""

    def state(self, record: RunRecord) -> str:
        """The run's state, in words its place can vouch for (a Slurm job: Slurm's, while no supervisor of it
        runs here)."""

    def where(self, record: RunRecord) -> Where:
        """Where its logs and events are."""

    def end_lost(self, record: RunRecord) -> bool:
        """A run read "lost" (its supervisor and processes gone): write its end as its place saw it; False
        when the place knows no more than "lost"."""

    def failure(
        self, record: RunRecord, telemetry: RunTelemetry, found: Failure
    ) -> tuple[Failure, tuple[Advice, ...]] | None:
        """What a failure means in this place (a job's time limit, its memory limit) and the fixes that
        place takes; None when it means what it means on this host."""

    def gpus_advice(self, record: RunRecord) -> tuple[Advice, ...]:
        """How to get GPUs in this place, for a run that found none."""

    # In the run's supervisor (runs/supervision/supervisor.py), on whatever machine its place started it.

    def started(self) -> dict[str, Any]:
        """status.json's fields of the run's supervisor as it starts (inside a Slurm job: the job's nodes)."""

    def ended(self, run_dir: Path, state: str, fields: dict[str, Any]) -> str:
        """The run's end in its place's words, added to ``fields`` (status.json's end); the run's state (a
        job's time limit makes it failed, not stopped)."""

    def freed(self, run_dir: Path, events: EventWriter) -> None:
        """Once the run's end is written: what its end frees (runs waiting in the queue for its GPUs)."""

    # For a reader (runs/reading/monitor.py, runs/record/listing.py).

    def row_fields(self, record: RunRecord) -> dict[str, Any]:
        """The place's fields in the run's row of ``gpumon runs --json`` (a job's id, state and reason)."""

    def line(self, record: RunRecord) -> str:
        """Where the run lives in one line for its detail ("Slurm job 5 · PENDING (Resources)"); "" here."""

    def waiting(self, root: Path, run_ids: Sequence[str]) -> dict[str, tuple[int | None, str]]:
        """Runs of this place that wait to start (state ``queued``): each one's position and why it waits,
        read once for all of them."""

    def wake(self, root: Path) -> None:
        """A reader that adopts found a run of this place waiting to start: make sure what starts it lives (the
        queue's keeper). Raises OSError when it cannot."""
