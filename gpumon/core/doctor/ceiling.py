"""The memory ceiling a CPU rank's heap is projected against: the lowest limit that applies to it.

The rank writes its limits in ``proc_start`` (gpumon/telemetry/limits.py): the soft ``RLIMIT_AS`` and
``RLIMIT_DATA``, its cgroup's ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1), and its host's
memory. The lowest wins. ``RLIMIT_AS`` caps the virtual size, not the heap: what the process had mapped
already (torch's libraries and reservations) is taken off it, so the heap's room is the limit minus that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpumon.core.format import size

# key in ``limits`` -> how the doctor names it; on a tie the first wins (the most specific)
SOURCES = {
    "as": "RLIMIT_AS",
    "data": "RLIMIT_DATA",
    "cgroup": "the cgroup's {file}",
    "host": "the host's",
}


@dataclass(frozen=True)
class Ceiling:
    bytes: int  # what the heap may reach: the limit, less what already counts against it (RLIMIT_AS)
    source: str  # a key of SOURCES
    limit: int  # the limit itself
    name: str  # "RLIMIT_AS", "the cgroup's memory.max", "the host's"

    @property
    def is_limit(self) -> bool:
        """A limit set on the process, lower than its host's memory."""
        return self.source != "host"

    def describe(self) -> str:
        """ "RLIMIT_AS 3.0 GiB (the address-space limit, 0.5 GiB of it mapped before the first step)"."""
        text = f"{self.name} {size(self.limit)}"
        if self.source == "as":
            taken = self.limit - self.bytes
            text += " (the address-space limit: virtual size, not only the heap"
            text += f"; {size(taken)} of it mapped at the start)" if taken > 0 else ")"
        return text


def _bytes(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def choose(limits: Mapping[str, Any] | None, host: int | None = None, heap: float | None = None) -> Ceiling | None:
    """The lowest limit in ``limits`` (a ``proc_start``'s), else ``host`` (this machine's memory).

    ``heap``: the rank's heap when its virtual size ``vm`` was read; the rest of ``vm`` is taken off
    ``RLIMIT_AS`` (it is not heap and does not go away).
    """
    limits = limits or {}
    found: list[tuple[int, int, str]] = []
    for order, key in enumerate(SOURCES):
        value = _bytes(host if key == "host" and _bytes(limits.get("host")) is None else limits.get(key))
        if value is not None:
            found.append((value, order, key))
    if not found:
        return None
    limit, _, key = min(found)
    room = limit
    vm = _bytes(limits.get("vm"))
    if key == "as" and vm is not None:
        room = max(0, limit - max(0, vm - int(heap or 0)))
    name = SOURCES[key].format(file=str(limits.get("cgroup_file") or "memory limit"))
    return Ceiling(room, key, limit, name)
