"""Proof with a real headless Chromium: the page loads (its one inline script allowed by the CSP, no CDN),
follows /api/events (server-sent events) and shows a run launched with no gpumon code, its loss and curve, its
doctor headline and the alert its failure raised; the page's own text never runs as HTML."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chromium_cdp import Chromium
from tests.conftest import wait_until
from tests.serve_helpers import get, start_serve, stop

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "data" / "scripts" / "plain_torch_loop.py"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a real Chromium: apt-get install chromium")


def test_chromium_shows_a_zero_code_run_its_loss_and_its_alert(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    name = "<img src=x onerror=alert(1)>"  # a run's name is not ours: text, never markup
    launched = subprocess.run(
        [sys.executable, "-m", "gpumon", "launch", "script", str(SCRIPT), "--name", name, "--",
         str(tmp_path / "never"), "60"],
        env=env, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.split()[-1]
    serve, url = start_serve(home, "--simulate", "2")
    try:

        def ended_with_alert() -> dict | None:
            doc = json.loads(get(url + "api/state")[2])
            alerts = [a for a in doc["alerts"] if a["run"] == run_id]
            runs = [r for r in doc["hosts"][0]["runs"] if r["id"] == run_id]
            return doc if alerts and runs and runs[0]["state"] == "failed" and runs[0]["loss_series"] else None

        doc = wait_until(ended_with_alert, timeout=180)
        assert doc, f"run {run_id} did not fail with an alert: {get(url + 'api/state')[2][:2000]!r}"
        (run,) = [r for r in doc["hosts"][0]["runs"] if r["id"] == run_id]
        alert = next(a for a in doc["alerts"] if a["run"] == run_id)
        browser = Chromium(CHROMIUM, tmp_path / "profile")
        try:
            browser.open(url)
            shown = f'data-run="{run_id}"'
            dom = wait_until(
                lambda: (lambda d: d if shown in d and 'data-feed="events"' in d else None)(browser.dom()), 120
            )
        finally:
            browser.close()
        assert dom, "the page never showed the run"
        assert 'data-feed="events"' in dom  # fed by serve's server-sent events, not by polling
        box = dom[dom.index(f'data-run="{run_id}"') :]
        box = box[: box.index('<div class="run"', 1)] if '<div class="run"' in box[1:] else box
        assert 'data-state="failed"' in box
        loss = re.search(r"loss ([-+0-9.e]+) ", box)  # 3 significant digits, as everywhere
        assert loss and math.isclose(float(loss.group(1)), run["loss"], rel_tol=5e-3, abs_tol=1e-4), box[
            :1500
        ]  # 3 digits
        points = re.search(r'data-points="(\d+)"', box)
        assert points and int(points.group(1)) == len(run["loss_series"]) >= 2  # the curve drawn
        assert "doctor: " in box and "lost its shard" in alert["text"]
        assert 'class="alert"' in dom and "lost its shard" in dom[dom.index('class="alert"') :]  # the alerts table
        assert "&lt;img src=x" in dom and "<img src=x" not in dom  # the name shown as text
        # each GPU's day from serve's ring (a point a minute: the open minute at least)
        assert dom.count('class="gpu-history"') == 2
        # serve read the run, its doctor and its alert without loading torch or ray (their native libraries)
        maps = Path(f"/proc/{serve.pid}/maps").read_text()
        assert "libtorch" not in maps and "_raylet" not in maps
    finally:
        stop(serve)
