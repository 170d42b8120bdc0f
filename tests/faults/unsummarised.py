"""A run folder as an older gpumon, or a copy from another machine, leaves it: spec, an ended status and raw
events (gzipped, as at a run's end), but no summary.json. Shared by the fault test and bench/unsummarised.py."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

from gpumon.core.events import encode


def write_unsummarised(runs_dir: Path, run_id: str, steps: int) -> Path:
    run_dir = runs_dir / run_id
    (run_dir / "events").mkdir(parents=True, mode=0o700)
    start = time.time() - steps * 0.01 - 60
    spec = {"kind": "script", "program": "train.py", "cwd": str(run_dir)}
    (run_dir / "spec.json").write_text(json.dumps(spec))
    status = {"state": "finished", "created": start, "started": start, "ended": start + steps * 0.01, "exit_code": 0}
    (run_dir / "status.json").write_text(json.dumps(status))
    with gzip.open(run_dir / "events" / "rank0.4242.jsonl.gz", "wb", compresslevel=1) as out:
        out.write(encode("proc_start", "rank0", {"rank": 0, "world_size": 1}, start))
        for step in range(1, steps + 1):
            t = start + step * 0.01
            out.write(
                encode("step", "rank0", {"step": step, "dt": 0.01, "dev": "cpu", "heap": 10**8, "rss": 2 * 10**8}, t)
            )
            loss = 2.0 / (1 + step / 1000)
            out.write(encode("metrics", "rank0", {"step": step, "metrics": {"loss": loss}, "source": "backward"}, t))
    return run_dir
