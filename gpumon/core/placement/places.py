"""One ``Placement`` per place, chosen once at launch from the spec and read back from the run's record.
See base.py for the interface, docs/architecture.md for how to add a place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpumon.core.placement.base import Launch, Placement, PlaceName, name_of
from gpumon.core.placement.local import Local
from gpumon.core.placement.nodes import Hosts as Hosts
from gpumon.core.placement.nodes import Node
from gpumon.core.placement.queued import Queued
from gpumon.core.placement.slurm import Slurm
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.supervision.launcher import STOP_GRACE_S

if TYPE_CHECKING:
    from gpumon.core.runs.record.store import RunRecord, RunStore

PLACES: dict[PlaceName, Placement] = {"local": Local(), "queued": Queued(), "slurm": Slurm(), "nodes": Node()}


def for_spec(spec: RunSpec) -> Placement:
    """The place a new run goes to by its spec (the queue and a group of hosts are asked for by their options:
    Queued(...), Hosts(...))."""
    return PLACES[name_of(spec)]


def of_record(record: RunRecord) -> Placement:
    """The place a run was given, from its record."""
    return PLACES[name_of(record.spec, record.status)]


def of_files(spec: Mapping[str, Any], status: Mapping[str, Any]) -> Placement:
    """The place of a run from its spec.json and status.json as read (its supervisor's view); a spec that does
    not read as one (gone, damaged) is this host's."""
    try:
        return PLACES[name_of(RunSpec.from_dict(dict(spec)), status)]
    except (TypeError, ValueError):
        return PLACES["local"]


def row_fields(record: RunRecord) -> dict[str, Any]:
    """The place's part of a run's row in ``gpumon runs --json``: every place's keys that each row carries
    (None off that place: ``slurm_job_id`` is on every row), then the fields of the run's own place."""
    blank: dict[str, Any] = {key: None for place in PLACES.values() for key in place.row_keys}
    return {**blank, **of_record(record).row_fields(record)}


def launch(
    spec: RunSpec, store: RunStore, visible_gpus: int, wait_s: float = 5.0, grace_s: float = STOP_GRACE_S
) -> RunRecord:
    """Start a run where its spec says: validate, write its directory, start (or submit) it."""
    return for_spec(spec).launch(spec, Launch(store, visible_gpus, wait_s, grace_s))


def stop(record: RunRecord, kill: bool = False) -> str:
    """Stop a run where it lives; a line for the user."""
    return of_record(record).stop(record, kill)


def command(spec: RunSpec, run_id: str) -> list[str]:
    """The argument list the run's supervisor starts, wherever it lives."""
    return for_spec(spec).command(spec, run_id)
