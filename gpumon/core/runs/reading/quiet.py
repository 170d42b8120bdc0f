"""When each rank last wrote to its events files: the latest time it may have stepped.

A reader shows a live run from its supervisor's summary.json, folded every 2 s, and a step after the summary's
latest may be in the files already. A rank's files are appended at every recorded step (``step`` events), so
their last write bounds the last step from above: the time since then is a quiet that is known, never guessed
from how late the fold runs. One directory listing and a ``stat`` per file of that rank, when asked.
"""

from __future__ import annotations

from pathlib import Path

from gpumon.core.runs.reading.progress import Written


def written(run_dir: Path) -> Written:
    """rank -> the latest modification time of its ``events/rank<N>.*.jsonl`` (None when it has none); each rank
    looked at once per call of this function."""
    seen: dict[int, float | None] = {}

    def last(rank: int) -> float | None:
        if rank not in seen:
            times = []
            try:
                for path in (run_dir / "events").glob(f"rank{rank}.*.jsonl"):
                    try:
                        times.append(path.stat().st_mtime)
                    except OSError:
                        continue
            except OSError:
                pass
            seen[rank] = max(times) if times else None
        return seen[rank]

    return last
