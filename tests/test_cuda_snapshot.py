"""Issue 52: the CUDA allocator snapshot a run keeps (``pymem/oom<N>.pickle``, ``pymem/rank<N>.pickle``) read by
gpumon offline, with no CDN: ``gpumon doctor RUN --snapshot`` as text and JSON, and serve's own page drawing it.
A pickle that names code is refused before anything in it runs; a link is never followed.

No GPU here: the snapshots are written by hand in the format of torch 2.13's ``torch.cuda.memory._snapshot()``
(torch/cuda/memory.py's Segment/Block/Frame). tests/test_gpu_pymem.py reads a real one kept at a real OOM."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.runs.reading.cuda_snapshot import SnapshotError, load
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import write_json
from tests.chromium_cdp import Chromium
from tests.conftest import wait_until
from tests.serve_helpers import get, start_serve, stop

MiB = 1024**2
RUN = "script-1206-120000-snap1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TORCH = "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"
HOSTILE = "/home/me/<img src=x onerror=alert(1)>.py"  # a file name is not ours: shown as text, never markup


def frames(*where: tuple[str, int, str]) -> list[dict[str, Any]]:
    return [{"filename": f, "line": n, "name": name} for f, n, name in where]


def block(address: int, size: int, state: str, stack: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"address": address, "size": size, "requested_size": size, "state": state, "frames": stack or []}


def segment(address: int, blocks: list[dict[str, Any]], device: int = 0) -> dict[str, Any]:
    total = sum(b["size"] for b in blocks)
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": device, "address": address, "total_size": total, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "allocated_size": allocated, "active_size": allocated,
            "blocks": blocks}  # fmt: skip


def hand_made_snapshot() -> dict[str, Any]:
    """Written by hand in torch's documented snapshot format, not captured from a GPU (there is none here): three
    segments on cuda:0 (26 MiB reserved, 18.5 MiB allocated), free pieces of 2, 1.5 and 4 MiB."""
    step = frames((TORCH, 125, "forward"), ("/home/me/train.py", 41, "train_step"), ("/home/me/train.py", 90, "main"))
    model = frames(("/home/me/model.py", 12, "__init__"), (HOSTILE, 3, "<module>"))
    first = [
        block(0x1000_0000, 8 * MiB, "active_allocated", step),
        block(0x1080_0000, 2 * MiB, "inactive"),
        block(0x10A0_0000, 10 * MiB, "active_allocated", model),
    ]
    second = [block(0x2000_0000, MiB // 2, "active_allocated"), block(0x2008_0000, 3 * MiB // 2, "inactive")]
    third = [block(0x3000_0000, 4 * MiB, "inactive")]
    return {
        "segments": [segment(0x1000_0000, first), segment(0x2000_0000, second), segment(0x3000_0000, third)],
        "device_traces": [[{"action": "alloc", "addr": 0x1000_0000, "size": 8 * MiB, "stream": 0, "frames": step}]],
    }


class Evil:
    """A pickle that runs a command when loaded: ``__reduce__`` names os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def ended_run(home: Path, snapshot: bytes | None = None) -> Path:
    """An ended run's folder as gpumon keeps it, with ``snapshot`` as its ``pymem/oom0.pickle``."""
    run_dir = home / "runs" / RUN
    for sub in ("events", "logs", "pymem"):
        (run_dir / sub).mkdir(parents=True)
    write_json(run_dir / "spec.json", RunSpec("script", program="train.py", nproc=1, cwd="/tmp").to_dict())
    write_json(run_dir / "status.json", {"state": "failed", "created": 1000.0, "started": 1000.5, "ended": 1010.0,
                                         "exit_code": 1})  # fmt: skip
    if snapshot is not None:
        (run_dir / "pymem" / "oom0.pickle").write_bytes(snapshot)
    return run_dir


def gpumon(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_doctor_reads_a_kept_snapshot_offline_as_text_and_json(tmp_path: Path) -> None:
    ended_run(tmp_path, pickle.dumps(hand_made_snapshot()))
    done = gpumon(tmp_path, "doctor", RUN, "--snapshot")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert f"{RUN}  CUDA snapshot {tmp_path / 'runs' / RUN / 'pymem' / 'oom0.pickle'}" in text, text
    # what the allocator holds, and how scattered its free bytes are: 7.5 MiB free, the largest piece 4 MiB
    assert (
        "  cuda:0: reserved 26.00 MiB in 3 segments, allocated 18.50 MiB, free in the cache 7.50 MiB, the largest "
        "free block 4.00 MiB (47% of the free bytes lie in smaller pieces)"
    ) in text, text
    # by the script's own line (not torch's linear.py), biggest first; a block with no stack said so
    assert (
        "  live bytes by the line that allocated them:\n"
        "    10.00 MiB in 1 blocks  model.py:12 (__init__)\n"
        "    8.00 MiB in 1 blocks  train.py:41 (train_step)\n"
        "    512.00 KiB in 1 blocks  (no stack recorded)\n"
    ) in text, text
    assert "    8.00 MiB  linear.py:125 (forward) < train.py:41 (train_step) < train.py:90 (main)" in text, text

    doc = json.loads(gpumon(tmp_path, "doctor", RUN, "--snapshot", "oom0.pickle", "--json").stdout)
    (snap,) = doc["snapshots"]
    (dev,) = snap["summary"]["devices"]
    held = (dev["reserved"], dev["allocated"], dev["free"], dev["largest_free"])
    assert held == (26 * MiB, 37 * MiB // 2, 15 * MiB // 2, 4 * MiB)
    top = snap["summary"]["stacks"][0]
    assert (top["file"], top["line"], top["bytes"], top["count"]) == ("model.py", 12, 10 * MiB, 1)
    assert [b["size"] for b in snap["summary"]["largest"]] == [10 * MiB, 8 * MiB, MiB // 2]


def test_a_pickle_that_names_code_is_refused_before_it_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = pickle.dumps(Evil(marker))
    ended_run(tmp_path, evil)
    done = gpumon(tmp_path, "doctor", RUN, "--snapshot")
    assert done.returncode == 2, done
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert re.search(r"is refused: it names (posix|os)\.system, .*nothing in it was run", done.stderr), done.stderr
    assert not marker.exists()  # refused, not run
    with pytest.raises(SnapshotError):
        load(tmp_path / "runs" / RUN / "pymem" / "oom0.pickle")
    assert not marker.exists()


def test_a_linked_snapshot_is_never_followed_and_a_mistake_is_one_line(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.pickle"
    elsewhere.write_bytes(pickle.dumps(hand_made_snapshot()))
    run_dir = ended_run(tmp_path)
    (run_dir / "pymem" / "oom0.pickle").symlink_to(elsewhere)
    done = gpumon(tmp_path, "doctor", RUN, "--snapshot", "oom0.pickle")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done
    assert f"oom0.pickle is a link to {elsewhere}: not followed" in done.stderr, done.stderr
    listed = gpumon(tmp_path, "doctor", RUN, "--snapshot")  # nor listed among the kept ones
    assert listed.returncode == 2 and f"{RUN} keeps no CUDA snapshot" in listed.stderr, listed.stderr
    typo = gpumon(tmp_path, "doctor", RUN, "--snapshot", "oom9.pickle")
    assert typo.returncode == 2 and len(typo.stderr.splitlines()) == 1, typo
    assert f"no snapshot 'oom9.pickle' here nor in {RUN}'s folder" in typo.stderr, typo.stderr
    climb = gpumon(tmp_path, "doctor", RUN, "--snapshot", "../../elsewhere.pickle")  # not out of the run's folder
    assert climb.returncode == 2 and "no snapshot '../../elsewhere.pickle'" in climb.stderr, climb.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="needs a real Chromium: apt-get install chromium")
def test_serve_draws_a_kept_snapshot_with_nothing_from_elsewhere(tmp_path: Path) -> None:
    ended_run(tmp_path, pickle.dumps(hand_made_snapshot()))
    serve, url = start_serve(tmp_path, "--simulate", "1")
    try:
        link = f"snapshot/{RUN}/oom0.pickle"
        assert wait_until(lambda: link in get(url)[2].decode(), timeout=60), get(url)[2][:3000]
        status, headers, body = get(url + link)
        html = body.decode()
        assert status == 200 and "script-src" not in headers["Content-Security-Policy"], headers
        assert not re.search(r"(src|href)=\"?(https?:)?//", html) and "http" not in html  # nothing to load from a CDN
        assert "&lt;img src=x onerror=alert(1)&gt;.py" in html and "<img" not in html and "<script" not in html
        assert get(url + f"snapshot/{RUN}/..%2Fspec.json")[0] == 404  # only the files the poll listed
        assert get(url + link, {"Host": "evil.example"})[0] == 421  # serve's Host check holds here too
        assert get(url + link, method="POST")[0] == 405
        browser = Chromium(CHROMIUM, tmp_path / "profile")
        try:
            browser.open(url + link)
            drawn = wait_until(lambda: browser.evaluate(DRAWN) or None, 60)
        finally:
            browser.close()
    finally:
        stop(serve)
    # three segments, widths to scale against the biggest (20 MiB), allocated and free pieces in address order
    assert drawn["segments"] == [[["allocated", 400], ["free", 100], ["allocated", 500]],
                                 [["free", 200]], [["allocated", 25], ["free", 75]]], drawn  # fmt: skip
    assert drawn["stacks"][0] == ["10.00 MiB", "1", "model.py:12 (__init__)"], drawn
    assert drawn["title"].startswith(f"CUDA snapshot oom0.pickle of run {RUN}"), drawn


DRAWN = """(() => {
  const rows = [...document.querySelectorAll("svg.segments g.segment")];
  if (!rows.length) return null;
  return {
    title: document.title,
    segments: rows.map(g => [...g.querySelectorAll("rect")].map(r =>
      [r.getAttribute("class"), Math.round(r.getBBox().width)])),
    stacks: [...document.querySelectorAll("#stacks tbody tr")].map(tr =>
      [...tr.querySelectorAll("td")].slice(0, 3).map(td => td.textContent)),
  };
})()"""
