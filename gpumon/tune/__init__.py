"""Ray Tune inside gpumon. Ray is imported only by the modules here, and only when used.

from gpumon.tune import GpumonCallback
tune.Tuner(train, run_config=tune.RunConfig(callbacks=[GpumonCallback()]))
"""

from __future__ import annotations

from typing import Any

__all__ = ["GpumonCallback"]


def __getattr__(name: str) -> Any:
    if name == "GpumonCallback":  # importing it imports ray.tune (seconds): only on use
        from gpumon.tune.callback import GpumonCallback

        return GpumonCallback
    raise AttributeError(name)
