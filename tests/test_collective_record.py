"""gpumon's own record of collectives (telemetry/collectives.py) on real gloo ranks: a collective names its
process group and its number in it however the script passes its arguments, and the time a rank blocks in an
async collective's ``work.wait()`` is time in collectives (the straggler lanes' wait).

Two ranks spawned with ``torch.multiprocessing`` (the lecture notes' way), the hook installed as the run's
bootstrap installs it, each rank's ledger (``stacks/<pid>.coll``) read as the doctor reads it at a stall.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpumon.core.collective_ledger import read_ranks
from gpumon.core.doctor.stuck import rank_lines

pytest.importorskip("torch")

SCRIPT = """
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from gpumon.telemetry import collectives
from gpumon.telemetry.coll_ledger import Ledger


def main(rank, store, run_dir):
    clock = collectives.Clock()
    clock.ledger = Ledger(run_dir)
    collectives.hook(torch, clock)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    pair = dist.new_group([0, 1])
    t = torch.ones(256)
    if rank == 1:
        time.sleep(1)  # the slow rank: rank 0 waits for it in its async all_reduce's wait()
    clock.take()
    dist.all_reduce(t, async_op=True).wait()
    waited = clock.take()[1]
    for _ in range(3):
        dist.all_reduce(t)  # the default group
        dist.all_reduce(t, dist.ReduceOp.SUM, pair)  # the pair's, by position
    dist.all_reduce(t, group=pair)  # the pair's, by name
    dist.broadcast(t, 0, pair)  # LAST
    name = dist.distributed_c10d._get_process_group_name(pair)
    with open(os.path.join(run_dir, f"rank{rank}"), "w") as out:
        out.write(f"{rank} {os.getpid()} {name} {waited}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(sys.argv[1], sys.argv[2]), nprocs=2)
"""


def test_a_positional_group_is_numbered_in_it_and_an_async_wait_is_time_in_collectives(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    last = next(n for n, line in enumerate(SCRIPT.splitlines(), 1) if "# LAST" in line)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), str(run_dir)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = [(run_dir / f"rank{rank}").read_text().split() for rank in (0, 1)]
    pids = {int(pid): int(rank) for rank, pid, _, _ in printed}
    (pair,) = {name for _, _, name, _ in printed}
    waited = [float(w) for *_, w in printed]
    assert waited[0] > 0.5 > waited[1], waited  # rank 0's wait for the slow rank is time in collectives
    assert rank_lines(read_ranks(run_dir, pids), [0, 1]) == [
        f"rank {rank}: not in a collective; last finished broadcast #5 ({pair}, 1.0 KiB, train.py:{last})"
        for rank in (0, 1)
    ]
