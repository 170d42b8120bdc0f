"""DCGM's profiling fields, where GPM is not read: said, not read (issue 37 item 1).

DCGM gives SM activity, occupancy, tensor and DRAM activity (``DCGM_FI_PROF_SM_ACTIVE`` 1002,
``DCGM_FI_PROF_SM_OCCUPANCY`` 1003, ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` 1004, ``DCGM_FI_PROF_DRAM_ACTIVE`` 1005)
on Volta and later, through its host engine (``nv-hostengine``, port 5555) and its Python bindings (``pydcgm``,
shipped with DCGM, not on PyPI). gpumon does not read them: the reason for a missing SM activity says whether
DCGM could give it here and how to see it (``dcgmi dmon -e 1002,1003,1004,1005``).

Per-process SM activity exists in neither: NVML's GPM samples a device (``nvmlGpmSampleGet``) or a MIG
instance (``nvmlGpmMigSampleGet``), and ``nvmlGpmSetStreamingEnabled`` only turns the driver's background
sampling on; DCGM's profiling fields are per GPU or per GPU instance too. The process rows keep NVML's
per-process SM utilisation (``nvmlDeviceGetProcessUtilization``: the time any of its kernels ran).
"""

from __future__ import annotations

import importlib.util
import shutil
import socket

DCGM_PORT = 5555
_said: str | None = None


def dcgm_reason() -> str:
    """Why DCGM's profiling fields are not shown here, in words (asked once per process)."""
    global _said
    if _said is None:
        _said = _reason()
    return _said


def _reason() -> str:
    bindings = importlib.util.find_spec("pydcgm") is not None or importlib.util.find_spec("dcgm_structs") is not None
    engine = _listening("127.0.0.1", DCGM_PORT)
    if not engine:
        where = " (dcgmi is installed)" if shutil.which("dcgmi") else ""
        return f"DCGM: no host engine (nv-hostengine) on port {DCGM_PORT}{where}"
    if not bindings:
        return (
            "DCGM: its host engine runs, its Python bindings (pydcgm) are not importable; "
            "`dcgmi dmon -e 1002,1003,1004,1005` shows SM activity"
        )
    return "DCGM runs here: gpumon does not read its profiling fields; `dcgmi dmon -e 1002,1003,1004,1005` shows them"


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
