"""Issue 51, point 3: the slow rank. In lock-step DDP every rank's step takes as long as the slowest's; what tells
the straggler is where the time goes: its own work against the wait inside collectives (telemetry/collectives.py,
core/runs/reading/lanes.py, core/doctor/straggler.py).

Real torchrun, four gloo ranks on the CPU (tests/data/scripts/straggler.py): rank 2 sleeps 40 ms more a step in
its dataset's __getitem__. The doctor names it, with its cause; ``runs --json`` and /metrics score every rank; a
run with no slow rank names none."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from gpumon.core.doctor.ended import user_frame


def test_a_collective_that_raises_is_placed_at_the_scripts_line_not_gpumons_wrapper(tmp_path: Path) -> None:
    # gpumon wraps dist.all_reduce to time it: the traceback passes through its wrapper, which is no user's line
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import traceback
            import torch
            import torch.distributed as dist
            from gpumon.telemetry import collectives

            collectives.hook(torch, collectives.Clock())
            dist.init_process_group("gloo", init_method="file://{tmp_path / "store"}", rank=0, world_size=1)
            try:
                dist.all_reduce("not a tensor")
            except Exception:
                print(traceback.format_exc())
            """
        )
    )
    trace = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120).stdout
    assert "collectives.py" in trace, trace  # the wrapper is in the traceback...
    where, _ = user_frame(trace)
    assert where == "train.py:10 in <module>", trace  # ... and the script's call is named
