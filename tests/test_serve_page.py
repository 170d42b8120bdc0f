"""The page ``gpumon serve`` serves holds the state in its first HTML (issue 50, item 11): fetched with no
JavaScript, or in a real Chromium with JavaScript turned off, it shows the GPUs and the runs, and the event stream
then updates it. And the page's smaller fixes (item 12), in a real Chromium: the doctor's "no problem seen" in a
calm colour, an ended run without a loss says none was recorded, the charts carry their values and a time axis,
and each GPU's memory and power history is drawn beside its utilisation."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.format import loss as loss_text
from gpumon.serve.ring import GpuRing
from tests.chromium_cdp import Chromium
from tests.conftest import wait_ended, wait_until
from tests.serve_helpers import get, serving

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "tests" / "data" / "scripts" / "plain_torch_loop.py"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NAME = "<b>quiet</b> & done"  # a run's name is not ours: text, never markup
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs a real Chromium: apt-get install chromium")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A home with two ended runs: (home, a plain torch loop's id that finished with a loss curve and memory
    samples the doctor found fine, a script's id that printed a line and kept no loss)."""
    import os

    cwd = tmp_path_factory.mktemp("page")
    home = cwd / "home"
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    (cwd / "quiet.py").write_text('print("hello")\n')

    def launch(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "gpumon", "launch", "script", *args], env=env, cwd=cwd,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[-1]

    quiet = launch(str(cwd / "quiet.py"), "--name", NAME)
    loop = launch(str(LOOP), "--", str(cwd / "stop"))
    log = home / "runs" / loop / "logs" / "rank0.log"
    assert wait_until(lambda: log.exists() and "step 300 " in log.read_text(), timeout=240), "the loop never stepped"
    (cwd / "stop").touch()
    wait_ended(home, quiet, loop)
    return home, loop, quiet


@pytest.fixture
def served(runs: tuple[Path, str, str]) -> Iterator[tuple[str, dict]]:
    """serve on 2 simulated GPUs over the runs' home, its ring a point every 0.3 s instead of a minute (so
    the history has points to draw now): (its URL, the /api/state document its page shows)."""
    with serving(runs[0], gpus=2) as (state, url):
        state.ring = GpuRing(bucket_s=0.3)

        def ready() -> dict | None:
            doc = json.loads(get(url + "api/state")[2])
            host = doc["hosts"][0]
            done = {r["id"]: r for r in host["runs"] if r["headline"]}
            points = [len(state.ring.points(host["name"], g["index"])) for g in host["gpus"]]
            return doc if len(done) == 2 and min(points, default=0) >= 3 else None

        doc = wait_until(ready, timeout=60)
        assert doc, get(url + "api/state")[2][:2000]
        yield url, doc


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    chromium = Chromium(str(CHROMIUM), tmp_path / "profile")
    try:
        yield chromium
    finally:
        chromium.close()


def _box(dom: str, run_id: str) -> str:
    """The markup of one run's box on the page."""
    box = dom[dom.index(f'data-run="{run_id}"') :]
    return box[: box.index('<div class="run"', 1)] if '<div class="run"' in box[1:] else box


def test_the_first_html_holds_the_gpus_and_the_runs_without_javascript(
    runs: tuple[Path, str, str], served: tuple[str, dict]
) -> None:
    _, loop, quiet = runs
    url, doc = served
    code, headers, body = get(url)  # urllib: no script runs, no stream is read
    html = body.decode()
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert "connecting…" not in html
    host = doc["hosts"][0]
    for gpu in host["gpus"]:
        assert f'data-gpu="{gpu["index"]}"' in html and gpu["name"] in html
    run = next(r for r in host["runs"] if r["id"] == loop)
    box = _box(html, loop)
    assert 'data-state="finished"' in box and f"loss {loss_text(run['loss'])} " in box
    assert f'data-points="{len(run["loss_series"])}"' in box and len(run["loss_series"]) >= 2  # its curve
    assert 'data-state="finished"' in _box(html, quiet)
    assert "&lt;b&gt;quiet&lt;/b&gt; &amp; done" in html and "<b>quiet</b>" not in html  # its name as text
    # the view alone, which the page polls where the stream is refused, is the same rendering
    assert f'data-run="{loop}"' in get(url + "page/view")[2].decode()


@needs_chromium
def test_chromium_without_javascript_shows_the_state_as_text(
    runs: tuple[Path, str, str], served: tuple[str, dict], browser: Chromium
) -> None:
    _, loop, quiet = runs
    url, doc = served
    browser.open(url, javascript=False)
    text = wait_until(lambda: (t := browser.evaluate("document.body.innerText")) and loop in t and t, 60)
    assert text, browser.dom()[:3000]
    assert browser.evaluate("document.body.dataset.feed") is None  # no script ran: this is serve's HTML
    assert "connecting" not in text
    for gpu in doc["hosts"][0]["gpus"]:
        assert f"GPU {gpu['index']} {gpu['name']}" in text
    assert quiet in text and NAME in text and "no loss recorded" in text
    assert re.search(r"loss: last \S+ · min \S+ · max \S+", text), text  # the curve's values, read as text


@needs_chromium
def test_chromium_draws_the_fixes_and_the_stream_keeps_them(
    runs: tuple[Path, str, str], served: tuple[str, dict], browser: Chromium
) -> None:
    _, loop, quiet = runs
    url, doc = served
    browser.open(url)
    shown = f'data-run="{quiet}"'
    dom = wait_until(lambda: (d := browser.dom()) and 'data-feed="events"' in d and shown in d and d, 60)
    assert dom, browser.dom()[:3000]
    ok = browser.evaluate(f"getComputedStyle(document.querySelector('[data-run=\"{loop}\"] .headline')).color")
    amber = browser.evaluate("(() => { const e = document.createElement('i'); e.className = 'warn'; "
                             "document.body.append(e); return getComputedStyle(e).color; })()")  # fmt: skip
    healthy = _box(dom, loop)
    assert "doctor: no problem seen" in healthy and 'class="headline ok"' in healthy
    assert ok != amber, "no problem seen is drawn in the warnings' colour"
    ended = _box(dom, quiet)
    assert "no loss recorded" in ended and "no loss curve yet" not in dom
    # the loss curve's axes: its max and min on the y axis, its first and last step on the x axis
    run = next(r for r in doc["hosts"][0]["runs"] if r["id"] == loop)
    ys = [v for _, v in run["loss_series"]]
    labels = re.findall(r'<text class="([xy])"[^>]*>([^<]*)</text>', healthy)
    assert ("y", loss_text(max(ys))) in labels and ("y", loss_text(min(ys))) in labels
    assert ("x", f"step {run['loss_series'][-1][0]:.0f}") in labels
    assert f"last {loss_text(ys[-1])}" in healthy
    # each GPU's history: utilisation, memory and power, each a line with values and a time axis
    for gpu in doc["hosts"][0]["gpus"]:
        card = dom[dom.index(f'data-gpu="{gpu["index"]}"') :]
        card = card[: card.index('<div class="gpu"', 1)] if '<div class="gpu"' in card[1:] else card
        for series in ("util", "memory", "power"):
            chart = card[card.index(f'data-series="{series}"') :]
            chart = chart[: chart.index("</figure>")]
            points = re.search(r'data-points="(\d+)"', chart)
            assert points and int(points.group(1)) >= 2 and "<polyline" in chart, (series, chart)
            assert re.search(r'<text class="x"[^>]*>\d\d:\d\d</text>', chart), chart  # the time axis
            assert re.search(r"last \S+.* · min .* · max ", chart), chart


def test_a_rendering_of_many_lines_is_one_event_whatever_its_line_ends() -> None:
    from gpumon.serve.events import text_event

    # a bare CR ends a line in an event stream: a name holding one must not end the event or start a field
    event = text_event("<main>a run\rretry: 1\r\nname\n</main>")
    assert event == b"data: <main>a run\ndata: retry: 1\ndata: name\ndata: </main>\n\n"
