"""The GPU queue of this host (core/queue/): the run waits in ``queue/`` until the keeper starts its supervisor
here; from then on it is a local run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.core.placement.base import Launch, PlaceName
from gpumon.core.placement.local import Local

# The queue's modules load when a queued run needs them: every `gpumon runs` and every supervisor holds this
# place (places.PLACES), most of them never for a queued run (issue 35).

if TYPE_CHECKING:
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunRecord


class Queued(Local):
    name: PlaceName = "queued"

    def __init__(self, **fields: object) -> None:
        self.fields = fields  # QueueEntry's gpus, gpu_mem, after, priority, slots (launch only)

    def launch(self, spec: RunSpec, how: Launch) -> RunRecord:
        """Validate and write the run (state ``queued``) and its entry; the keeper starts it when it fits."""
        from gpumon.core.queue import submit as queue

        return queue.submit(spec, how.store, how.visible_gpus, **self.fields)

    def withdraw(self, record: RunRecord) -> str | None:
        from gpumon.core.queue import submit as queue

        if queue.cancel(record.dir.parent.parent, record.id):
            return f"cancelled {record.id} (it was queued)"
        return ""  # the keeper started it meanwhile

    def row_fields(self, record: RunRecord) -> dict[str, Any]:
        """``queue_position`` and ``queue_reason``: its place in the queue and why it waits."""
        from gpumon.core.queue.entry import queue_fields

        return queue_fields(record.dir.parent.parent, record.id)

    def waiting(self, root: Path, run_ids: Sequence[str]) -> dict[str, tuple[int | None, str]]:
        """From the keeper's plan, read once whatever the number of queued runs."""
        from gpumon.core.queue.entry import queue_fields, read_plan

        plan = read_plan(root)
        out: dict[str, tuple[int | None, str]] = {}
        for run_id in run_ids:
            fields = queue_fields(root, run_id, plan)
            out[run_id] = (fields["queue_position"], str(fields["queue_reason"]))
        return out

    def wake(self, root: Path) -> None:
        """Queued runs and no keeper (it was killed): start one."""
        from gpumon.core.queue.keeper import ensure_keeper

        ensure_keeper(root)
