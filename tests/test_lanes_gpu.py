"""Issue 51, point 3, on a GPU: the slow-rank lanes come from the host's clocks, which on a GPU see a collective's
launch, not its wait (NCCL runs on the device's streams; a fast rank waits wherever it next synchronises, counted as
its own work). There gpumon names no straggler and says why, rather than a confident wrong rank.

The ranks' events are replayed into a real run under the real supervisor (tests/data/scripts/replay_events.py) and
read through the real CLI: the same steps on the CPU name rank 0 (the check that the events would be judged), on
``cuda`` nobody, with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.runs.record.store import RunStore
from tests.conftest import wait_until

REPLAY = Path(__file__).resolve().parent / "data" / "scripts" / "replay_events.py"


def _events(dev: str) -> list[dict]:
    """Two ranks, 0.1 s a step: rank 1 spends 50 ms of it in backward (waiting for its peer, as the host's clock
    reads it), rank 0 5 ms; on the CPU that makes rank 0 the one whose own work is long."""
    out: list[dict] = []
    for rank in (0, 1):
        out.append({"v": 1, "type": "proc_start", "src": f"rank{rank}", "t": 1000.0, "pid": 1, "rank": rank,
                    "rank_from": "env", "local_rank": rank, "world_size": 2, "restart": 0, "host": "gpu1",
                    "argv": ["train.py"], "ppid": 0, "started": "exec"})  # fmt: skip
    for step in range(1, 121):
        for rank in (0, 1):
            out.append({"v": 1, "type": "step", "src": f"rank{rank}", "t": 1001.0 + step * 0.1, "pid": 1,
                        "step": step, "dt": 0.1 if step > 1 else None, "dev": f"{dev}:{rank}" if dev != "cpu" else dev,
                        "bw": 0.005 if rank == 0 else 0.05, "coll": 0.0})  # fmt: skip
    return out


@pytest.mark.parametrize("dev", ["cpu", "cuda"])
def test_ranks_on_a_gpu_get_no_straggler_from_host_clocks_and_say_why(dev: str, tmp_path: Path) -> None:
    home, config = tmp_path / "state", tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text("[runs]\nstraggler_after = 3\n")
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in _events(dev)))
    env = {**os.environ, "GPUMON_HOME": str(home), "GPUMON_CONFIG_DIR": str(config), "CUDA_VISIBLE_DEVICES": ""}

    def gpumon(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    run_id = gpumon("launch", "script", str(REPLAY), "--", str(events), "--gap", "0.005").split()[-1]
    assert wait_until(lambda: not RunStore(home).resolve(run_id).live, timeout=90, step=0.2)
    (row,) = [r for r in json.loads(gpumon("runs", "--json", run_id))["runs"] if r["id"] == run_id]
    doctor = json.loads(gpumon("doctor", run_id, "--json"))
    text = gpumon("doctor", run_id)
    stragglers = [s for s in doctor["slow"] if s["kind"] == "straggler"]
    if dev == "cpu":  # the same steps on the CPU: judged, rank 0 named
        assert all(r["score"] is not None for r in row["ranks"]) and row["lanes_unknown"] is None, row
        assert stragglers and stragglers[0]["rank"] == 0, doctor["slow"]
        return
    assert row["ranks"] and all(r["score"] is None for r in row["ranks"]), row["ranks"]
    assert doctor["lanes"] == [] and not stragglers, (doctor["lanes"], doctor["slow"])
    reason = "unknown on cuda: its collectives and kernels run on the device's streams"
    assert reason in row["lanes_unknown"] and reason in doctor["lanes_unknown"], row
    assert f"the slow rank: {reason}" in text, text
