"""Processes of one run that print at once (mp.spawn workers, a script and its helpers share the log's pipe): each
line reaches the log whole, as in a terminal. The launcher asks for unbuffered output (-u, PYTHONUNBUFFERED) so
logs stream; unbuffered, print() writes each piece and its newline apart, and lines of other processes landed
between them ("...Steps: 16[CPU1] Epoch 1..." then an empty line), which the log's readers then misparse."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import wait_ended

SCRIPT = """
import multiprocessing as mp, sys

def work(rank):
    for step in range(400):
        print(f"[rank{rank}]", "step", step, "|", "loss", 0.5, "|", "lr", 0.1)
        sys.stderr.write(f"[rank{rank}] warn " + str(step) + "\\n")

if __name__ == "__main__":
    procs = [mp.get_context(sys.argv[1]).Process(target=work, args=(r,)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
"""
LINE = re.compile(r"\[rank[0-3]\] (step \d+ \| loss 0\.5 \| lr 0\.1|warn \d+)")


def test_lines_printed_at_once_by_four_processes_reach_the_log_whole(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}
    for start in ("spawn", "fork"):
        done = subprocess.run(
            [sys.executable, "-m", "gpumon", "launch", "script", "train.py", "--", start],
            env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.split()[-1]
        wait_ended(tmp_path / "home", run_id)
        lines = (tmp_path / "home" / "runs" / run_id / "logs" / "rank0.log").read_text().splitlines()
        broken = [line for line in lines if not LINE.fullmatch(line)]
        assert not broken, (start, broken[:5])
        assert len(lines) == 4 * 400 * 2, (start, len(lines))
