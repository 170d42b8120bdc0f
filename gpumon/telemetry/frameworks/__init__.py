"""Metrics and totals from what training frameworks already log, with no change to the script.

``install()`` watches for the script's own import of each framework (``imports.when_imported``); a
framework never imported costs nothing, and none is imported by us. Each hook lives in its own module,
imported only when its framework is, writes ``metrics`` events with a ``source`` and ``total`` events
(docs/events.md), and never raises into the script (``report.guarded``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from gpumon.telemetry.imports import when_imported

# The module whose import completes the part a hook patches -> our hook module.
HOOKS = {
    "transformers.trainer": "hf",
    "lightning.pytorch.trainer.trainer": "lightning",
    "pytorch_lightning.trainer.trainer": "lightning",
    "tqdm.std": "tqdm",
    "torch.utils.tensorboard.writer": "tensorboard",
    "tensorboardX.writer": "tensorboard",
    "wandb.sdk.wandb_run": "wandb",
    "mlflow.tracking.client": "mlflow",
    "ray.train.v2._internal.execution.context": "raytrain",
    "ray.train._internal.session": "raytrain",
}


def install() -> None:
    """Watch for every framework's import (call once per process)."""
    for module, hook in HOOKS.items():
        when_imported(module, _runner(hook))


def _runner(hook: str) -> Callable[[ModuleType], None]:
    def run(module: ModuleType) -> None:
        ours = importlib.import_module(f"{__name__}.{hook}")
        ours.hook(module)

    return run
