"""A Slurm job: sbatch starts the run's supervisor on the job's first node (core/slurm/), scancel stops it,
and Slurm's own words say how it ended (core/doctor/slurm_end.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.core.placement.base import Launch, PlaceName, Where
from gpumon.core.runs.record.spec import validate
from gpumon.core.runs.record.store import RunRecord
from gpumon.core.runs.supervision import launcher

# Slurm's modules load when a Slurm run needs them: every `gpumon runs` and every supervisor holds this place
# (places.PLACES), most of them never for a job (issue 35).

if TYPE_CHECKING:
    from gpumon.core.doctor.advice_types import Advice
    from gpumon.core.doctor.failures import Failure
    from gpumon.core.events import EventWriter
    from gpumon.core.runs.reading.telemetry import RunTelemetry
    from gpumon.core.runs.record.spec import RunSpec


class Slurm:
    name: PlaceName = "slurm"
    supervised_here = False
    row_keys: tuple[str, ...] = ("slurm_job_id", "slurm_state", "slurm_reason")  # core/slurm/rows.py

    def check(self, spec: RunSpec) -> None:
        from gpumon.core.slurm import launch as job

        job.check(spec)

    def command(self, spec: RunSpec, run_id: str) -> list[str]:
        from gpumon.core.slurm import launch as job

        return job.slurm_command(spec)

    def launch(self, spec: RunSpec, how: Launch) -> RunRecord:
        """The run's directory as for any run; its start a job (nothing starts on this machine)."""
        from gpumon.core.slurm import launch as job

        self.check(spec)
        spec = validate(spec, how.visible_gpus)
        run_id, run_dir = how.store.new_run_dir(spec)
        (run_dir / "logs").mkdir(mode=0o700)
        command = {
            "argv": self.command(spec, run_id),
            "env": launcher.build_env(spec, run_id, run_dir),
            "cwd": spec.cwd,
        }
        job.submit_run(spec, run_id, run_dir, {**command, "grace_s": how.grace_s})
        return how.store.load(run_dir) or RunRecord(run_id, run_dir, spec, {})

    def stop(self, record: RunRecord, kill: bool = False) -> str:
        """scancel: Slurm signals its supervisor on the node (or drops the job while it is pending)."""
        from gpumon.core.slurm import jobs

        if not record.live:
            return f"{record.id} is not running ({record.state})"
        job_id = str(record.status.get("slurm_job_id") or "")
        if not job_id:  # sbatch has not answered yet: there is no job to cancel
            raise OSError(f"{record.id} is being submitted (no job id yet): stop it again in a moment")
        why = jobs.cancel(job_id)
        if why:
            raise OSError(f"could not cancel job {job_id}: {why}")
        return f"cancelled job {job_id} ({record.id})"

    def withdraw(self, record: RunRecord) -> str | None:
        return None  # a pending job is cancelled by stop

    def state(self, record: RunRecord) -> str:
        return record.state  # the store asks Slurm while no supervisor of it runs here (record.state_elsewhere)

    def where(self, record: RunRecord) -> Where:
        return Where(record.dir, str(record.status.get("slurm_nodes") or ""))

    def end_lost(self, record: RunRecord) -> bool:
        from gpumon.core.slurm.ending import record_job_end

        record_job_end(record)  # the job is over: Slurm's end (a time limit killed the supervisor too)
        return True

    def failure(
        self, record: RunRecord, telemetry: RunTelemetry, found: Failure
    ) -> tuple[Failure, tuple[Advice, ...]] | None:
        from gpumon.core.doctor.slurm_end import slurm_advice, slurm_failure

        if not record.status.get("slurm_end"):
            return None
        return slurm_failure(record), tuple(slurm_advice(record, telemetry))

    def gpus_advice(self, record: RunRecord) -> tuple[Advice, ...]:
        from gpumon.core.doctor.slurm_end import gpus_advice

        return tuple(gpus_advice(record)) if record.spec.slurm is not None else ()

    def started(self) -> dict[str, Any]:
        from gpumon.core.slurm.ending import started

        return started()  # Slurm's state and the job's nodes, from the job's environment

    def ended(self, run_dir: Path, state: str, fields: dict[str, Any]) -> str:
        from gpumon.core.slurm.ending import at_end

        return at_end(run_dir, state, fields)  # a time limit is a failure, not a stop

    def freed(self, run_dir: Path, events: EventWriter) -> None:
        from gpumon.core.queue.keeper import wake

        wake(run_dir.parent.parent, events)  # as any run's end does (the state dir is the login host's too)

    def row_fields(self, record: RunRecord) -> dict[str, Any]:
        from gpumon.core.slurm.rows import slurm_fields

        return slurm_fields(record)  # a live job asks Slurm (one cached squeue for all)

    def line(self, record: RunRecord) -> str:
        from gpumon.core.slurm.rows import slurm_line

        return slurm_line(record)

    def waiting(self, root: Path, run_ids: Sequence[str]) -> dict[str, tuple[int | None, str]]:
        return {}  # a pending job waits in Slurm's queue: its line says why

    def wake(self, root: Path) -> None:
        return None
