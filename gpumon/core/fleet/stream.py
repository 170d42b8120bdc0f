"""The line format of ``gpumon snapshot --json --watch``: one compact JSON document per line (JSON Lines).

Every line carries ``schema`` (``SNAPSHOT_SCHEMA``), ``version`` (gpumon's) and ``fields``, so a reader
can tell a gpumon it cannot read from one it can. ``fields = "full"`` is ``gpumon snapshot --json``'s
document on one line; ``fields = "fleet"`` (what the fleet asks for) keeps only what a fleet view draws:
the same keys with the same meanings, fewer of them, floats rounded to 0.1, commands cut at 120
characters, keys without a value left out (read them as null), per-CPU use in whole percents, no NVML
``na`` reasons, no clocks. ``sent`` is when the line was written (the reader's latency). An older gpumon's line
lacks the uuid, a process's kind, the host's swap, time and per-CPU use: ``Snapshot.from_dict`` reads them as
unknown.
"""

from __future__ import annotations

import json
import time
from typing import Any

from gpumon import __version__
from gpumon.core.model import SNAPSHOT_SCHEMA, Snapshot

FIELDS = ("full", "fleet")
COMMAND_CHARS = 120
# What a fleet host's screen (Enter on a host) draws is kept: Snapshot.from_dict reads it (uuid, a process's kind,
# the host's swap and per-core use); the rest (clocks, fans, ECC, NVLink...) only the full document carries.
_DEVICE_KEYS = (
    "index", "uuid", "name", "state", "reason", "gpu_util", "mem_used", "mem_total", "mem_percent",
    "temperature", "power_draw", "power_limit", "processes_reason", "vendor",
)  # fmt: skip
_PROCESS_KEYS = (
    "gpu_index", "pid", "used_memory", "sm_util", "kind", "user", "command", "create_time", "simulated",
    "container_id", "container_runtime", "container_name", "pod_uid", "pod", "namespace", "slurm_job",
)  # fmt: skip
_HOST_KEYS = ("hostname", "cpu_percent", "load", "mem_used", "mem_total", "swap_used", "swap_total", "time")


class StreamError(ValueError):
    """A line this gpumon cannot read; the message says why in words."""


def _round(value: Any) -> Any:
    return round(value, 1) if isinstance(value, float) else value


def _pick(doc: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The keys that have a value: a key left out reads as null (N/A)."""
    return {key: _round(doc[key]) for key in keys if doc.get(key) is not None}


def stream_doc(snap: Snapshot, fields: str = "full") -> dict[str, Any]:
    """The document of one line."""
    full = snap.to_dict()
    head = {"schema": SNAPSHOT_SCHEMA, "version": __version__, "fields": fields}
    if fields == "full":
        return {**head, **full}
    processes = []
    for proc in full["processes"]:
        row = _pick(proc, _PROCESS_KEYS)
        if proc.get("create_time") is not None:
            row["create_time"] = proc["create_time"]  # kept exact: it guards a signal against PID reuse
        if isinstance(row.get("command"), str) and len(row["command"]) > COMMAND_CHARS:
            row["command"] = row["command"][: COMMAND_CHARS - 1] + "…"
        processes.append(row)
    host = _pick(full["host"], _HOST_KEYS)
    host["load"] = [round(x, 2) for x in full["host"]["load"]] if full["host"]["load"] else None
    host["per_cpu"] = [round(x) for x in full["host"]["per_cpu"]]  # whole percents: a core's bar, not a figure
    return {
        **head,
        **{key: full[key] for key in ("time", "source", "simulated", "driver", "reason")},
        "devices": [_pick(dev, _DEVICE_KEYS) for dev in full["devices"]],
        "processes": processes,
        "host": host,
    }


def encode_line(doc: dict[str, Any]) -> str:
    """One line, no spaces, stamped with when it was written."""
    return json.dumps({**doc, "sent": round(time.time(), 3)}, separators=(",", ":"))


def decode_line(line: str | bytes) -> dict[str, Any]:
    """A line's document; StreamError when it is not one this gpumon reads (``version mismatch: ...``)."""
    try:
        doc = json.loads(line)
    except ValueError:
        raise StreamError(f"not a snapshot line: {str(line)[:80]!r}") from None
    if not isinstance(doc, dict) or "schema" not in doc:
        raise StreamError(f"not a snapshot line: {str(line)[:80]!r}")
    if doc.get("schema") != SNAPSHOT_SCHEMA or not isinstance(doc.get("devices"), list):
        theirs = doc.get("version") or f"of snapshot schema {doc.get('schema')}"
        raise StreamError(
            f"version mismatch: remote gpumon {theirs}, here {__version__}: install the same gpumon on both"
        )
    return doc
