"""Moved to gpumon.core.searches.shipped (the core resolves a shipped search without importing gpumon.tune).

A shim for old imports, to remove once nothing imports it (docs/architecture.md).
"""

from gpumon.core.searches.shipped import *  # noqa: F403
