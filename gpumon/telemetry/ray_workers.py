"""Which Ray worker trains as a rank of the run: Ray Train's workers are, Ray Tune's trials are not.

Ray starts every worker process of a local cluster from the driver's environment, so each has the
bootstrap's hooks. A Tune trial is reported by the Tune callback (its trials, not ranks) and stays quiet.
A Ray Train worker (``TorchTrainer``'s ``RayTrainWorker`` actor) is one rank of a data-parallel job: its
world rank comes from Ray Train's context, which Ray 2.60 (Train V2) sets in the worker before the
training function starts. Train workers of a Tune experiment (a trainer run inside a trial) stay quiet:
several trials' rank 0s would share one name. Nothing here imports Ray: its modules are read from
``sys.modules``.
"""

from __future__ import annotations

import sys
from pathlib import Path

V2_CONTEXT = "ray.train.v2._internal.execution.context"  # Train V2's worker context (Ray >= 2.43)
V1_SESSION = "ray.train._internal.session"  # Train V1 (RAY_TRAIN_V2_ENABLED=0): the session a worker holds
TUNE_SOURCE = "tune"  # the Tune callback's event file (gpumon/tune/callback.py)


def in_worker() -> bool:
    """A process Ray started to run tasks or actors (not a driver)."""
    worker = sys.modules.get("ray._private.worker")
    try:
        return worker is not None and worker.global_worker.mode == worker.WORKER_MODE
    except Exception:  # noqa: BLE001 - another Ray: not one of its workers
        return False


def train_rank() -> tuple[int, int, int] | None:
    """(world rank, world size, local rank) of this process as a Ray Train worker; None elsewhere."""
    context = sys.modules.get(V2_CONTEXT)
    try:
        found = getattr(context, "_train_context", None) if context is not None else None
        if found is not None:
            dist = found.distributed_context
            return int(dist.world_rank), int(dist.world_size), int(dist.local_rank)
        session = sys.modules.get(V1_SESSION)
        found = getattr(session, "_session", None) if session is not None else None
        if found is not None and found.world_rank is not None:  # a Tune trial's session has no world rank
            return int(found.world_rank), int(found.world_size), int(found.local_rank)
    except Exception:  # noqa: BLE001 - another Ray's layout: no Train rank known
        return None
    return None


def quiet(run_dir: str | None) -> bool:
    """A Ray worker that is no rank of the run: a Tune trial (or any task that trains), or a Train worker of a
    Tune experiment (the run's Tune callback writes its trials). A Ray driver that trains itself is a rank."""
    if not in_worker():
        return False
    if train_rank() is None:
        return True
    return run_dir is not None and _tune_runs(run_dir)


def _tune_runs(run_dir: str) -> bool:
    from gpumon.core.events import EVENTS_DIR

    try:
        return any(p.name.startswith(f"{TUNE_SOURCE}.") for p in (Path(run_dir) / EVENTS_DIR).iterdir())
    except OSError:
        return False
