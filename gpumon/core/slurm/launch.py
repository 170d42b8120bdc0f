"""``gpumon launch ... --slurm``: the run's directory as for any run, its command the srun step, its start a
job submitted with sbatch. Nothing starts on this machine: the job's first node starts the supervisor."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from gpumon.core.runs.record.spec import RunSpec, SpecError
from gpumon.core.runs.record.store import write_json, write_text
from gpumon.core.slurm.step import step_argv, torchrun_args
from gpumon.core.slurm.submit import SCRIPT, SlurmError, SlurmOptions, batch_script, sbatch_argv, submit


def check(spec: RunSpec) -> None:
    """What a job cannot run, in one line (the rest is checked by validate and by sbatch)."""
    options = SlurmOptions.from_dict(spec.slurm or {})
    if spec.kind == "tune":
        raise SpecError("--slurm runs training runs; start a search's own Ray cluster in a job for tune")
    if spec.gpus is not None:
        raise SpecError("with --slurm Slurm picks the GPUs: ask with --gpus-per-node N, not --gpus")
    if spec.nnodes > 1 or spec.rdzv_endpoint:
        raise SpecError("with --slurm give the nodes with --nodes N (the rendezvous comes from the job)")
    if options.nodes > 1 and spec.kind in ("dp", "model-parallel"):
        raise SpecError(f"{spec.kind} runs in one process on one node: drop --nodes, or use ddp")


def slurm_command(spec: RunSpec) -> list[str]:
    options = SlurmOptions.from_dict(spec.slurm or {})
    target = ["-m", spec.module] if spec.module else [str(spec.program)]
    if spec.uses_torchrun or options.nodes > 1:
        run = ["-m", "torch.distributed.run", *torchrun_args(options.nodes, spec.nproc, spec.max_restarts)]
        return step_argv(options.nodes, [sys.executable, *run, *target, *spec.full_args])
    return step_argv(options.nodes, [sys.executable, "-u", *target, *spec.full_args])


def submit_run(spec: RunSpec, run_id: str, run_dir: Path, command: dict[str, Any]) -> dict[str, Any]:
    """Write the run's files and submit its job; the status written. Raises SlurmError (the run's directory
    removed: nothing was started)."""
    options = SlurmOptions.from_dict(spec.slurm or {})
    if options.nodes > 1:  # rank log pipes are local to a node: the other nodes' ranks write through srun
        command["env"].pop("GPUMON_RANK_LOGS", None)
    write_json(run_dir / "spec.json", spec.to_dict())
    write_json(run_dir / "command.json", command)
    status: dict[str, Any] = {"state": "pending", "created": time.time(), "slurm_state": "PENDING"}
    write_json(run_dir / "status.json", status)
    argv = sbatch_argv(options, run_dir, run_id, spec.cwd, spec.nproc)
    write_text(run_dir / SCRIPT, batch_script(run_dir, argv))
    (run_dir / SCRIPT).chmod(0o700)
    try:
        job = submit(argv)
    except SlurmError:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    status.update(slurm_job_id=job, sbatch=argv)
    write_json(run_dir / "status.json", status)
    return status
