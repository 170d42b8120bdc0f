"""The GPU queue of this host (core/queue/): the run waits in ``queue/`` until the keeper starts its supervisor
here; from then on it is a local run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.core.placement.base import PlaceName
from gpumon.core.placement.local import Local
from gpumon.core.queue import submit as queue

if TYPE_CHECKING:
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunRecord, RunStore


class Queued(Local):
    name: PlaceName = "queued"

    def __init__(self, **fields: object) -> None:
        self.fields = fields  # QueueEntry's gpus, gpu_mem, after, priority, slots (launch only)

    def launch(
        self, spec: RunSpec, store: RunStore, visible_gpus: int, wait_s: float = 5.0, grace_s: float = 0.0
    ) -> RunRecord:
        """Validate and write the run (state ``queued``) and its entry; the keeper starts it when it fits."""
        return queue.submit(spec, store, visible_gpus, **self.fields)

    def withdraw(self, record: RunRecord) -> str | None:
        if queue.cancel(record.dir.parent.parent, record.id):
            return f"cancelled {record.id} (it was queued)"
        return ""  # the keeper started it meanwhile
