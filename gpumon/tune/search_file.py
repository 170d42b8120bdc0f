"""Moved to gpumon.core.searches.search_file (the core checks a search file without importing gpumon.tune).

A shim for old imports, to remove once nothing imports it (docs/architecture.md).
"""

from gpumon.core.searches.search_file import *  # noqa: F403
