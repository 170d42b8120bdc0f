"""This host: a detached supervisor started here (core/runs/supervision/launcher.py) owns the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.core.placement.base import PlaceName, Where
from gpumon.core.runs.supervision import launcher

if TYPE_CHECKING:
    from gpumon.core.doctor.advice_types import Advice
    from gpumon.core.doctor.failures import Failure
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunRecord, RunStore


class Local:
    """The default place, and what the others fall back to once their run is on this host."""

    name: PlaceName = "local"
    supervised_here = True

    def check(self, spec: RunSpec) -> None:
        return None

    def command(self, spec: RunSpec, run_id: str) -> list[str]:
        return launcher.build_command(spec, run_id)

    def launch(
        self,
        spec: RunSpec,
        store: RunStore,
        visible_gpus: int,
        wait_s: float = 5.0,
        grace_s: float = launcher.STOP_GRACE_S,
    ) -> RunRecord:
        return launcher.launch(spec, store, visible_gpus, wait_s, grace_s)

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
