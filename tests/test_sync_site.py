"""A sync is named at the user's line, not torch's (issue 37 item 3, ``gpu_watch.user_site``): real stacks taken
where a real script's ``.item()`` and ``print(loss)`` call ``Tensor.item`` (on CUDA the read that syncs and that
the sync debug mode warns at; ``print`` calls it inside torch's tensor formatting), and the warning raised
there as torch's C++ raises it, at the innermost Python frame: torch's own for ``print(loss)``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.telemetry.gpu_watch import SYNC_WORDS, user_site

SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "sync_sites.py"

HARNESS = """
import json, runpy, sys, warnings
import torch
from gpumon.telemetry.gpu_watch import SyncCount, stack_of

stacks = []

def at_scalar_read(frame, event, arg):
    # Tensor.item / tolist called from Python (the reads a CUDA tensor syncs for): the calling frame's stack.
    if event == "c_call" and getattr(arg, "__name__", "") in ("item", "tolist") and "Tensor" in repr(arg):
        stacks.append(stack_of(frame))
        # As torch's C++ TORCH_WARN does: at the innermost Python frame, the one that called the op.
        warnings.warn_explicit("called a synchronizing CUDA operation", UserWarning, frame.f_code.co_filename,
                               frame.f_lineno)

count = SyncCount(torch)
count.catch()
sys.setprofile(at_scalar_read)
runpy.run_path(sys.argv[1], run_name="__main__")
sys.setprofile(None)
print("RESULT=" + json.dumps({"stacks": stacks, "counted": count.leave()}))
"""


def _run() -> dict:
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-c", HARNESS, str(SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT=")]
    return json.loads(line[len("RESULT=") :])


def _line(text: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if line.strip() == text)


def test_item_and_print_syncs_are_named_at_the_scripts_lines_not_torchs() -> None:
    found = _run()
    item, printed = f"sync_sites.py:{_line('total += loss.item()')}", f"sync_sites.py:{_line('print(loss)')}"
    sites = [user_site(frames) for frames in found["stacks"]]
    assert set(sites) == {item, printed}, sites
    # print(loss)'s reads are deep in torch: the innermost frame, where the warning points, is torch's.
    deep = [frames for frames in found["stacks"] if user_site(frames) == printed]
    assert deep and all("/torch/" in frames[0][0] for frames in deep), deep[0][:3]
    # The counter, catching the real warnings, names the script's lines with how many reads each made.
    counted = found["counted"]
    by_site = {s["site"]: s["count"] for s in counted["sync_sites"]}
    assert set(by_site) == {item, printed} and by_site[item] == 3, counted
    assert counted["syncs"] == len(found["stacks"]) and by_site[printed] >= 3, counted


def test_a_librarys_own_sync_names_the_users_call_and_the_library_line() -> None:
    frames = [
        ("/v/lib/python3.11/site-packages/torch/_tensor.py", 10),
        ("/v/lib/python3.11/site-packages/transformers/trainer.py", 2345),
        ("/v/lib/python3.11/site-packages/transformers/trainer.py", 1900),
        ("/home/me/train.py", 30),
        ("<frozen runpy>", 88),
    ]
    assert user_site(frames, dirs=()) == "train.py:30 via trainer.py:2345"
    assert user_site(frames[:3], dirs=()) is None  # no frame of the user's: the warning's own place stays
    assert SYNC_WORDS in "called a synchronizing CUDA operation"
