"""Slurm's time format: ``--time`` and ``TimeLimit`` as seconds, and seconds as Slurm writes them.

Slurm takes "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours", "days-hours:minutes" and
"days-hours:minutes:seconds" (sbatch(1)); "UNLIMITED" and "INFINITE" are no limit.
"""

from __future__ import annotations

import re

_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def seconds(text: object) -> int | None:
    """Seconds of a Slurm time ("1" is a minute, "1-12" a day and a half); None for no limit or not a time."""
    found = _TIME.fullmatch(str(text).strip()) if text is not None else None
    if found is None:
        return None
    days, first, second, third = found.groups()
    parts = [int(first), *(int(p) for p in (second, third) if p is not None)]
    if days is not None:  # days-hours[:minutes[:seconds]]
        hours, minutes, secs = [*parts, 0, 0][:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + secs
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)  # minutes[:seconds]


def slurm_time(total: float) -> str:
    """Seconds as Slurm writes a time: "00:05:30", "1-02:00:00"."""
    days, rest = divmod(max(0, round(total)), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{hours:02d}:{minutes:02d}:{secs:02d}"
