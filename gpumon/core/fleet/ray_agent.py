"""What runs on each Ray node: gpumon's own GPU and host sources, sampled on request.

``ray_driver`` wraps ``NodeAgent`` with ``ray.remote`` and pins one to every node; this module imports
no Ray, so it is plain code to test and to ship to the nodes (``runtime_env`` ``py_modules``).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from gpumon.core.gpu import open_gpu_source
from gpumon.core.host import HostSource
from gpumon.core.model import Snapshot


def _nvml_from_ray() -> None:
    """A node with Ray but without nvidia-ml-py still reads NVML: Ray vendors the same bindings."""
    if importlib.util.find_spec("pynvml") is not None:
        return
    try:
        from ray._private.thirdparty import pynvml
    except ImportError:
        return  # NvmlSource then says "nvidia-ml-py is not installed"
    sys.modules["pynvml"] = pynvml


class NodeAgent:
    """One per node; ``sample()`` returns the ``gpumon snapshot --json`` document of the node."""

    def __init__(self, simulate: int = 0, seed: int = 0) -> None:
        if not simulate:
            _nvml_from_ray()
        self.host = HostSource()  # before the GPU source: CPU percent needs a window since its priming
        self.gpu = open_gpu_source(simulate or None, seed)

    def sample(self) -> dict[str, Any]:
        return Snapshot(gpu=self.gpu.sample(), host=self.host.sample()).to_dict()

    def close(self) -> None:
        self.gpu.close()
