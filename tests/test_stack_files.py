"""The bootstrap's stack files (faulthandler on SIGUSR2) under a real script: one per live Python process of a
run, none left by the workers a DataLoader starts each epoch, and never a signal meant for gpumon sent to a
script's own SIGUSR2 handler."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpumon.core.runs.supervision.launcher import BOOTSTRAP_DIR

pytest.importorskip("torch")

EPOCHS = textwrap.dedent(
    """
    import os, sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    if __name__ == "__main__":
        data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(2):  # new workers each epoch (no persistent_workers): a second epoch starts them again
            for x, y in DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context=sys.argv[1]):
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        print(" ".join(sorted(os.listdir(os.path.join(os.environ["GPUMON_RUN_DIR"], "stacks")))), flush=True)
        print(os.getpid(), flush=True)
    """
)


def run(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(source)
    env = {**os.environ, "GPUMON_RUN_DIR": str(tmp_path / "run"), "PYTHONPATH": BOOTSTRAP_DIR}
    env.pop("RANK", None)
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_dataloader_workers_of_every_epoch_leave_no_stack_file(tmp_path: Path, start: str) -> None:
    done = run(tmp_path, EPOCHS, start)
    assert done.returncode == 0, done.stderr
    listed, pid = done.stdout.split("\n")[:2]
    files = listed.split()
    # the script's own, and multiprocessing's resource tracker where spawn started one; not 4 workers' files
    assert f"{pid}.txt" in files and len(files) <= 2, files
    assert not (tmp_path / "run" / "stacks" / f"{pid}.txt").exists()  # empty at a normal exit: gone


OWN_HANDLER = textwrap.dedent(
    """
    import os, signal, sys, time

    got = []
    signal.signal(signal.SIGUSR2, lambda signum, frame: got.append(signum))
    stacks = os.path.join(os.environ["GPUMON_RUN_DIR"], "stacks")
    print(" ".join(sorted(os.listdir(stacks))), flush=True)
    if os.fork() == 0:  # a forked child keeps the script's handler too
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.2)
        os._exit(0 if got else 5)
    _, status = os.wait()
    print(os.waitstatus_to_exitcode(status), os.getpid(), flush=True)
    """
)


def test_a_handler_the_script_sets_itself_takes_sigusr2_over(tmp_path: Path) -> None:
    done = run(tmp_path, OWN_HANDLER)
    assert done.returncode == 0, done.stderr
    listed, tail = done.stdout.split("\n")[:2]
    code, pid = tail.split()
    assert listed == f"{pid}.taken"  # the supervisor never signals it
    assert code == "0"  # the child got the script's handler, not SIG_DFL (which ends it) nor gpumon's dump
