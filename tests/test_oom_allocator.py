"""Issue 52 on CUDA, read on a CPU: the allocator's early warnings (cudaMalloc retries rising, fragmentation) raised
as alerts before the OOM, and the doctor's OOM answer showing the largest blocks at the failure with their lines,
stacks and the kept snapshot. The CUDA rank cannot run here: its events (tests/data/events/cuda_oom_rank0.jsonl,
as telemetry/steps.py and cuda_history.py write them) are replayed into a real run by a real script under the real
supervisor, and read through the real CLI. tests/test_gpu_pymem.py provokes a real OOM where a GPU is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunStore, write_json
from gpumon.telemetry.cuda_history import largest
from tests.conftest import make_app, pilot_until, wait_until
from tests.test_doctor_view import doctor_text, open_doctor, select
from tests.test_runs_view import open_runs

DATA = Path(__file__).resolve().parent / "data"
EVENTS = DATA / "events" / "cuda_oom_rank0.jsonl"
GiB = 1024**3


def gpumon(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_cuda_run_that_retries_and_fragments_alerts_before_its_oom_and_the_doctor_names_the_largest_blocks(
    run_home: Path,
) -> None:
    before = "--alerts-before-oom=alloc_retries,fragmentation"  # the steps before the OOM give the supervisor time
    done = gpumon(run_home, "launch", "script", str(DATA / "scripts" / "replay_events.py"), "--", str(EVENTS), before)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    assert wait_until(lambda: not RunStore(run_home).resolve(run_id).live, timeout=60, step=0.2)
    row = {r["id"]: r for r in json.loads(gpumon(run_home, "runs", "--json").stdout)["runs"]}[run_id]
    retries = [a for a in row["alerts"] if a.startswith("allocator retries rising")]
    fragments = [a for a in row["alerts"] if a.startswith("allocator fragmentation")]
    # once each, before the failure's, with the fix whole and why empty_cache is not it
    assert retries == [
        "allocator retries rising on rank 0: 1 cudaMalloc retry in the last minute (PyTorch freed its cache and "
        "retried: the next step may OOM). Fix: Give the allocator room before it fails: "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (gpumon launch --env PYTORCH_CUDA_ALLOC_CONF=...), or a "
        "smaller batch; torch.cuda.empty_cache() is not the fix: the allocator already emptied its cache before each "
        "retry, so it frees nothing more and only makes every step call cudaMalloc (a GPU sync) again"
    ], row["alerts"]
    assert len(fragments) == 1 and fragments[0].startswith(
        "allocator fragmentation on rank 0: PyTorch reserves 78.00 GiB while the step's peak allocates 46.00 GiB: "
        "32.00 GiB (40% of the GPU's 79.18 GiB) is cached and unused"
    ), row["alerts"]
    assert "expandable_segments:True" in fragments[0] and "empty_cache() is not the fix" in fragments[0]
    assert row["alerts"][-1].startswith("failed with exit code 1: CUDA out of memory on GPU 0"), row["alerts"]

    doctor = json.loads(gpumon(run_home, "doctor", run_id, "--json").stdout)
    failure = doctor["failure"]
    assert failure["kind"] == "cuda_oom", failure
    recorded = next(json.loads(x) for x in EVENTS.read_text().splitlines() if '"oom_snapshot"' in x)
    snapshot = failure["snapshot"]
    assert snapshot["largest"] == recorded["largest"]  # the event's bytes, exactly
    kept = RunStore(run_home).resolve(run_id).dir / "pymem" / "oom0.pickle"
    assert snapshot["path"] == str(kept) and kept.exists()
    assert snapshot["view"] == f"python -m torch.cuda._memory_viz trace_plot {kept} -o oom0.html"
    keys = [a["key"] for a in doctor["advice"]]
    assert {"oom_blocks", "expandable_segments"} <= set(keys), keys
    assert "alloc_retries" not in keys and "fragmentation" not in keys  # the OOM's own expandable_segments says it
    assert [w.split(" on rank 0: ")[0] for w in snapshot["warned"]] == [
        "allocator retries rising",
        "allocator fragmentation",
    ]
    blocks = doctor["advice"][keys.index("oom_blocks")]
    assert blocks["title"].endswith("the largest block, 8.00 GiB, was allocated at train.py:41"), blocks
    assert blocks["why"] == (
        "largest blocks at the OOM: 8.00 GiB train.py:41, 4.00 GiB model.py:12, 2.00 GiB model.py:15, "
        "1024.00 MiB adam.py:88, 512.00 MiB train.py:30"
    )

    text = gpumon(run_home, "doctor", run_id).stdout
    assert (
        "  largest blocks at the OOM (rank 0, cuda:0): 8.00 GiB train.py:41, 4.00 GiB model.py:12, 2.00 GiB "
        "model.py:15, 1024.00 MiB adam.py:88, 512.00 MiB train.py:30\n"
    ) in text, text
    assert "  before the OOM: allocator retries rising on rank 0: 1 cudaMalloc retry in the last minute" in text
    assert "    4.00 GiB: linear.py:125 (forward) < module.py:1784 (_call_impl) < model.py:12 (forward)" in text
    assert (
        f"  snapshot kept: {kept}; read it: gpumon doctor {run_id} --snapshot oom0.pickle (or gpumon serve's page, "
        f"or python -m torch.cuda._memory_viz trace_plot {kept} -o oom0.html)"
    ) in text  # gpumon's own reader first: no browser, no CDN
    assert snapshot["read"] == f"gpumon doctor {run_id} --snapshot oom0.pickle"


def test_an_oom_snapshots_largest_blocks_are_named_at_the_scripts_line_with_their_stack() -> None:
    """A block made inside torch (nn.Linear's forward) is the script's line that called it, its stack kept."""
    frames = [
        {"filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
        {"filename": "/home/me/model.py", "line": 12, "name": "forward"},
        {"filename": "/home/me/train.py", "line": 40, "name": "train_step"},
    ]
    snap = {
        "segments": [
            {
                "blocks": [
                    {"size": GiB, "state": "active_allocated", "frames": frames},
                    {"size": 3 * GiB, "state": "inactive", "frames": []},  # cached, not allocated
                    {"size": 2 * GiB, "state": "active_allocated", "frames": []},  # allocated before stacks were on
                ]
            }
        ]
    }
    found = largest(snap, user=lambda name: "site-packages" not in name)
    assert found == [
        {"size": 2 * GiB},
        {
            "size": GiB,
            "file": "model.py",
            "line": 12,
            "stack": ["linear.py:125 (forward)", "model.py:12 (forward)", "train.py:40 (train_step)"],
        },
    ]


@pytest.mark.parametrize("env", ["1", ""])
def test_oom_stacks_are_recorded_only_when_asked_and_the_window_gives_them_back(
    env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPUMON_OOM_STACKS=1: the live blocks' stacks from the first step, and again after a memory window ends."""
    from gpumon.telemetry import cuda_history

    calls: list[dict] = []

    class Memory:
        @staticmethod
        def _record_memory_history(**kw: object) -> None:
            calls.append(dict(kw))

    class Torch:
        class cuda:  # torch's own name
            memory = Memory

    monkeypatch.setenv(cuda_history.STACKS_ENV, env)
    cuda_history.stop(Torch)  # type: ignore[arg-type]
    state = {"enabled": "state", "context": "state", "stacks": "python"}
    assert calls == ([state] if env else [{"enabled": None}])


async def test_the_doctor_view_shows_the_oom_snapshots_blocks_and_the_warnings_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorded events as an ended run's folder holds them (no supervisor: the view folds them itself)."""
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    run_id = "script-1206-120000-oom1"
    run_dir = tmp_path / "runs" / run_id
    for sub in ("events", "logs", "pymem"):
        (run_dir / sub).mkdir(parents=True)
    lines = [x for x in EVENTS.read_text().splitlines() if not x.startswith("#")]
    (run_dir / "events" / "rank0.4242.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "pymem" / "oom0.pickle").write_bytes(b"")
    exception = json.loads(lines[-1])
    (run_dir / "logs" / "rank0.log").write_text(f"{exception['exc_type']}: {exception['message']}\n")
    write_json(run_dir / "spec.json", RunSpec("script", program="train.py", nproc=1, cwd="/tmp").to_dict())
    write_json(run_dir / "status.json", {"state": "failed", "created": 1000.0, "started": 1000.5, "ended": 1010.0,
                                         "exit_code": 1})  # fmt: skip
    app = make_app(gpus=1)
    async with app.run_test(size=(160, 50)) as pilot:
        await open_runs(pilot, 1)
        await select(pilot, run_id)
        text = await open_doctor(pilot, run_id, "largest blocks at the OOM")
        await pilot_until(pilot, lambda: "snapshot kept" in doctor_text(app))
        text = doctor_text(app)
    flat = " ".join(text.split())  # the view wraps long lines
    assert "largest blocks at the OOM (rank 0, cuda:0): 8.00 GiB train.py:41, 4.00 GiB model.py:12, 2.00 GiB" in flat
    assert "before the OOM: allocator fragmentation on rank 0: PyTorch reserves 78.00 GiB" in flat
    kept = run_dir / "pymem" / "oom0.pickle"
    assert f"snapshot kept: {kept}; read it: gpumon doctor {run_dir.name} --snapshot oom0.pickle" in flat
