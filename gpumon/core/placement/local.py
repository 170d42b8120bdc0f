"""This host: a detached supervisor started here (core/runs/supervision/launcher.py) owns the run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.core.placement.base import Launch, PlaceName, Where
from gpumon.core.runs.supervision import launcher

if TYPE_CHECKING:
    from gpumon.core.doctor.advice_types import Advice
    from gpumon.core.doctor.failures import Failure
    from gpumon.core.events import EventWriter
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunRecord


class Local:
    """The default place, and what the others fall back to once their run is on this host."""

    name: PlaceName = "local"
    supervised_here = True
    row_keys: tuple[str, ...] = ()

    def check(self, spec: RunSpec) -> None:
        return None

    def command(self, spec: RunSpec, run_id: str) -> list[str]:
        return launcher.build_command(spec, run_id)

    def launch(self, spec: RunSpec, how: Launch) -> RunRecord:
        return launcher.launch(spec, how.store, how.visible_gpus, how.wait_s, how.grace_s)

    def stop(self, record: RunRecord, kill: bool = False) -> str:
        return launcher.stop(record, kill)

    def withdraw(self, record: RunRecord) -> str | None:
        return None

    def state(self, record: RunRecord) -> str:
        return record.state

    def where(self, record: RunRecord) -> Where:
        return Where(record.dir)

    def end_lost(self, record: RunRecord) -> bool:
        return False

    def failure(
        self, record: RunRecord, telemetry: RunTelemetry, found: Failure
    ) -> tuple[Failure, tuple[Advice, ...]] | None:
        return None

    def gpus_advice(self, record: RunRecord) -> tuple[Advice, ...]:
        return ()

    def started(self) -> dict[str, Any]:
        """A run of this host launched inside a Slurm allocation (salloc, a batch script) records the job
        around its supervisor (its state and nodes; not its id: the run is not the job's)."""
        from gpumon.core.slurm.ending import started

        return started()

    def ended(self, run_dir: Path, state: str, fields: dict[str, Any]) -> str:
        return state

    def freed(self, run_dir: Path, events: EventWriter) -> None:
        from gpumon.core.queue.keeper import wake

        wake(run_dir.parent.parent, events)

    def row_fields(self, record: RunRecord) -> dict[str, Any]:
        return {}

    def line(self, record: RunRecord) -> str:
        return ""

    def waiting(self, root: Path, run_ids: Sequence[str]) -> dict[str, tuple[int | None, str]]:
        return {}

    def wake(self, root: Path) -> None:
        return None
