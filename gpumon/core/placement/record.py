"""How a run records its place, read back: the leaf of the placement, which the store and the launcher
import (the places themselves are built on the store, so it cannot import them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from gpumon.core.slurm.liveness import job_state

if TYPE_CHECKING:
    from gpumon.core.runs.record.spec import RunSpec

PlaceName = Literal["local", "queued", "slurm", "nodes"]


def name_of(spec: RunSpec, status: Mapping[str, Any] | None = None) -> PlaceName:
    """The place a run was given at launch, from what its spec and status recorded: a Slurm run's options are
    in spec.json and its job id in status.json, a queued run's state is ``queued``, a node of a group has
    ``group``. The one function that knows how a place is written down."""
    if spec.slurm is not None or (status or {}).get("slurm_job_id"):
        return "slurm"
    if (status or {}).get("state") == "queued":
        return "queued"  # waits for the queue's keeper; once started it lives on this host
    if spec.group:
        return "nodes"
    return "local"


def elsewhere(spec: RunSpec, status: Mapping[str, Any] | None = None) -> bool:
    """The run's supervisor is not on this host (a job's node): no pid of it is signalled from here."""
    return name_of(spec, status) == "slurm"


def state_elsewhere(spec: RunSpec, status: Mapping[str, Any]) -> Callable[[str], str] | None:
    """For a run whose place can vouch for it while no supervisor of it runs here (a submitted job: Slurm
    says), what turns its recorded live state into the place's; None for a run of this host."""
    job = status.get("slurm_job_id")
    if not job or not elsewhere(spec, status):
        return None
    return lambda recorded: job_state(recorded, str(job))
