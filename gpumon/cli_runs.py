"""Transitional: ``gpumon.tui.views.runs.launch_form`` still imports ``default_nproc`` from here.

The CLI is the package ``gpumon.cli`` now and ``default_nproc`` lives in ``gpumon.core.runs.spec``; delete
this module once the launch form imports it from there.
"""

from gpumon.core.runs.spec import default_nproc

__all__ = ["default_nproc"]
