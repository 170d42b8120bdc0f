"""Issue 51, points 4 and 5 on CUDA: the stuck collective named live under NCCL (``pytest -m gpu``; needs 2 GPUs).

NCCL's collectives return once enqueued, so a rank that called broadcast where the others called all_reduce, or
all-reduced half the bytes, blocks later at the loss's ``.item()``; the ranks' last collectives started still
name it. NCCL hangs on a size mismatch where gloo aborts. The ranks run with the Flight Recorder and NCCL's dump
on timeout, as gpumon sets them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Gpumon, requires_gpu
from tests.test_stuck_collective import BROADCAST, HALF, stalled, stuck_runs

pytestmark = [pytest.mark.gpu, requires_gpu]


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


needs_two = pytest.mark.skipif(_gpus() < 2, reason="NCCL needs a GPU per rank: 2 GPUs for 2 ranks")


@pytest.fixture
def on_gpus(gpumon: Gpumon) -> Gpumon:
    gpumon.env.pop("CUDA_VISIBLE_DEVICES", None)  # the conftest hides GPUs from the CPU tests
    return gpumon


@pytest.fixture
def stuck(on_gpus: Gpumon, tmp_path: Path) -> Iterator[Callable[..., str]]:
    yield from stuck_runs(on_gpus, tmp_path)


@needs_two
def test_nccl_broadcast_against_all_reduce_is_named_live(on_gpus: Gpumon, stuck: Any) -> None:
    run_id = stuck("mismatch", 2, "--backend", "nccl")
    stall = stalled(on_gpus, run_id)
    head = f"a collective mismatch: rank 1 is in broadcast #8 ({BROADCAST}) while rank 0 is in all_reduce #8"
    assert stall["headline"] == head
    pid = next(int(p.name.split(".")[0]) for p in (on_gpus.home / "runs" / run_id / "stacks").glob("*.coll"))
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"TORCH_NCCL_DUMP_ON_TIMEOUT=1" in environ and b"TORCH_FR_BUFFER_SIZE=2000" in environ


@needs_two
def test_nccl_size_mismatch_hangs_and_is_named_live(on_gpus: Gpumon, stuck: Any) -> None:
    run_id = stuck("size", 2, "--backend", "nccl")
    stall = stalled(on_gpus, run_id)
    assert stall["collective"]["kind"] == "size_mismatch" and stall["collective"]["where"] == HALF
