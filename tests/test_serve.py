"""gpumon serve: what it refuses (a bind beyond localhost without a token, a token others can read), the 401,
GET/HEAD only, framing headers, and /metrics' names, units and labels, on a real serve process."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from gpumon.serve.ring import GpuRing
from gpumon.serve.runs_view import StepHistogram
from tests.serve_helpers import get, start_serve, stop

TOKEN = "s3cret-token-0123456789abcdef"


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", "serve", "--port", "0", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bind_beyond_localhost_without_a_token_is_refused(tmp_path: Path) -> None:
    done = _serve(tmp_path, "--bind", "0.0.0.0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--token-file" in lines[0] and "0.0.0.0" in lines[0], done.stderr
    assert done.stdout == ""  # it never listened


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o644)
    done = _serve(tmp_path, "--bind", "0.0.0.0", "--token-file", str(token))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "chmod 600" in done.stderr and "0644" in done.stderr
    assert TOKEN not in done.stderr  # the secret is never said


def test_requests_need_the_token_and_nothing_writes(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    proc, url = start_serve(tmp_path / "home", "--simulate", "2", "--token-file", str(token))
    try:
        for path in ("", "metrics", "api/state", "api/events"):
            code, headers, body = get(url + path)
            assert code == 401, path
            assert headers["X-Frame-Options"] == "DENY"
            assert TOKEN.encode() not in body
        assert get(url + "metrics", {"Authorization": "Bearer wrong-token-0123456789"})[0] == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        code, headers, body = get(url + "metrics", auth)
        assert code == 200 and b"gpumon_up" in body
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            code, headers, _ = get(url + "api/state", auth, method=method)
            assert (code, headers["Allow"]) == (405, "GET, HEAD"), method
        code, headers, body = get(url, auth, method="HEAD")
        assert code == 200 and body == b""
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
        # a browser's first visit: ?token= once, then the cookie (HttpOnly, SameSite=Strict), and a redirect to
        # the same page without the token: it leaves the address bar and the browser's history
        code, headers, _ = _no_redirect(url + f"?token={TOKEN}&x=1")
        cookie = headers["Set-Cookie"]
        assert code == 303 and headers["Location"] == "/?x=1" and TOKEN not in headers["Location"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        code, _, page = get(url + "?x=1", {"Cookie": cookie.split(";")[0]})
        assert code == 200 and b'class="gpu"' in page and TOKEN.encode() not in page
        assert get(url + "api/state", {"Cookie": cookie.split(";")[0]})[0] == 200
    finally:
        stop(proc)


def _no_redirect(url: str) -> tuple[int, Any, bytes]:
    """One GET whose redirect is the answer, not followed."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
    resp = conn.getresponse()
    return resp.status, resp.headers, resp.read()


def test_a_bind_to_every_address_prints_addresses_one_can_open(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    proc, url = start_serve(tmp_path / "home", "--simulate", "1", "--bind", "0.0.0.0", "--token-file", str(token))
    try:
        assert proc.stdout is not None
        lines: list[str] = []  # serve's next line, read on a thread: a serve that prints none fails, not hangs
        reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(30)
        also = lines[0] if lines else ""
        port = url.rstrip("/").rsplit(":", 1)[1]
        assert url == f"http://127.0.0.1:{port}/" and "0.0.0.0" not in also
        assert also.startswith("gpumon serve: also ")
        name = socket.gethostname()
        with contextlib.suppress(OSError):  # the machine's name, where it resolves
            socket.getaddrinfo(name, None, socket.AF_INET)
            assert f"http://{name}:{port}/" in also.split()
        for shown in [url, *also.split()[3:]]:  # each one opens
            assert get(shown + "metrics", {"Authorization": f"Bearer {TOKEN}"})[0] == 200, shown
    finally:
        stop(proc)


def test_a_port_already_taken_says_so_and_how_to_choose_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
        done = subprocess.run(
            [sys.executable, "-m", "gpumon", "serve", "--simulate", "1", "--port", str(port)],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "taken" in lines[0], done.stderr
    assert "--port N" in lines[0] and "--port 0" in lines[0]


def test_metrics_are_prefixed_in_base_units_with_stable_labels(tmp_path: Path) -> None:
    proc, url = start_serve(tmp_path / "home", "--simulate", "3")
    try:
        code, headers, body = get(url + "metrics")
        assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        assert all(name.startswith("gpumon_") for name in families)
        assert families["gpumon_up"].samples[0].value == 1.0
        used = families["gpumon_gpu_memory_used_bytes"].samples
        assert len(used) == 3 and {s.labels["gpu"] for s in used} == {"0", "1", "2"}
        assert all(set(s.labels) == {"host", "gpu", "uuid", "name", "vendor"} for s in used)
        assert all(s.value > 2**30 for s in used)  # bytes, not MiB
        util = families["gpumon_gpu_utilization_ratio"].samples
        assert all(0.0 <= s.value <= 1.0 for s in util)
        assert families["gpumon_gpu_sm_clock_hertz"].samples[0].value > 1e8  # hertz, not MHz
        procs = families["gpumon_process_gpu_memory_bytes"].samples
        assert procs and all(
            set(s.labels) == {"host", "gpu", "pid", "user", "run", "container", "pod", "namespace", "slurm_job"}
            for s in procs
        )
        # the same numbers as the API
        state = json.loads(get(url + "api/state")[2])
        assert state["hosts"][0]["gpus"][0]["mem_total"] == families["gpumon_gpu_memory_total_bytes"].samples[0].value
        assert all("command" not in p for p in state["hosts"][0]["processes"])  # command lines carry secrets
        assert b"command" not in body
    finally:
        stop(proc)


def test_the_gpu_ring_keeps_a_day_in_bounded_memory() -> None:
    ring = GpuRing(seconds=3600, bucket_s=60)
    for t in range(0, 3 * 3600, 5):  # three hours at 5 s: only the last hour's 60 minutes are kept, plus the open one
        ring.add("h", [{"index": 0, "gpu_util": float(t % 100), "mem_used": t, "power_draw": 100.0}], float(t))
    points = ring.points("h", 0)
    assert len(points) == 61
    assert points[-1][0] == 3 * 3600 - 60 and points[-1][2] == 3 * 3600 - 5  # the open minute: its peak memory


def test_step_histogram_counts_steps_and_wall_time() -> None:
    hist = StepHistogram()
    hist.see(10, 100.0)
    hist.see(20, 101.0)  # 10 steps in 1 s: 0.1 s each
    hist.see(20, 102.0)  # no step: nothing observed
    hist.see(22, 103.0)  # 2 steps in 1 s (from the last step's sighting at 101): 1 s each
    assert (hist.count, hist.total) == (12, 3.0)
    buckets = dict(hist.cumulative())
    assert buckets["0.1"] == 10 and buckets["1.0"] == 12 and buckets["+Inf"] == 12


def test_every_metric_is_documented_and_every_documented_metric_is_served() -> None:
    from gpumon.serve.metrics import registry
    from gpumon.serve.view import HostView, View

    run = {
        "id": "r1", "name": "n", "kind": "script", "state": "running", "host": "h", "live": True, "step": 3,
        "loss": 0.5, "samples_per_s": 1.0, "tokens_per_s": 2.0, "mfu": 0.3, "step_time_s": 0.1,
        "median_step_s": 0.1, "data_wait": 0.2, "memory_bytes": 10, "progress": 0.5, "total_steps": 6,
        "eta_s": 3.0, "last_step_t": 1.0, "nonfinite": 0,
        "ledger": {"startup": 9.0, "steps": 12.0, "checkpoint": 4.5, "eval": 2.0, "stall": 0.0, "restart": 0.0,
                   "end": 1.5, "wall": 29.0, "saves": 3, "evals": 2},
        "ranks": [{"rank": 0, "pid": 1, "step": 3, "host": "h", "memory_bytes": 10, "growth_bytes_per_step": 1.0,
                   "memory_leak": False}],
    }  # fmt: skip
    dev = {"index": 0, "uuid": "u", "name": "g", "mem_used": 1, "mem_total": 2, "gpu_util": 1.0, "mem_util": 1.0,
           "temperature": 30, "power_draw": 1.0, "power_limit": 2.0, "fan": 10, "sm_clock": 1, "mem_clock": 1,
           "ecc_errors": 0}  # fmt: skip
    proc = {"gpu_index": 0, "pid": 1, "user": "u", "used_memory": 1, "sm_util": 1.0, "run": "r1"}
    host = HostView(name="h", link="local", devices=(dev,), processes=(proc,), runs=(run,))
    hist = StepHistogram()
    hist.see(1, 0.0)
    hist.see(3, 1.0)
    view = View(time=__import__("time").time(), hosts=(host,), alert_counts={("h", "failed"): 1}, steps={"r1": hist})
    families = list(registry(lambda: view).collect())
    served = {m.name + ("_total" if m.type == "counter" else "") for m in families}
    [seconds] = [m for m in families if m.name == "gpumon_run_seconds"]  # the run's ledger, one sample a part
    parts = {s.labels["part"]: s.value for s in seconds.samples if s.name == "gpumon_run_seconds_total"}
    assert parts == {k: v for k, v in run["ledger"].items() if k not in ("wall", "saves", "evals")}, parts
    served = {"gpumon_build_info" if n == "gpumon_build" else n for n in served}
    doc = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    import re

    documented = set(re.findall(r"`(gpumon_[a-z_]+)`", doc))
    assert served - documented == set(), "served but not in docs/metrics.md"
    assert documented - served == set(), "in docs/metrics.md but not served"


def test_one_serve_exports_the_fleet_labelled_by_host_with_each_links_state(tmp_path: Path) -> None:
    import shlex

    from tests.conftest import wait_until
    from tests.test_fleet_links import stand_in

    ssh = shlex.join(stand_in(tmp_path / "hosts", gpus=3))
    proc, url = start_serve(tmp_path / "home", "--simulate", "2", "--hosts", "local,gpu1,denied", "--ssh", ssh)
    try:

        def scraped() -> dict | None:
            families = {f.name: f for f in text_string_to_metric_families(get(url + "metrics")[2].decode())}
            links = {s.labels["host"]: s.labels["link"] for s in families["gpumon_host_link_info"].samples}
            return families if links.get("gpu1") == "live" and links.get("denied") == "down" else None

        families = wait_until(scraped, timeout=60)
        assert families, get(url + "metrics")[2].decode()[:3000]
        up = {s.labels["host"]: s.value for s in families["gpumon_host_up"].samples}
        assert up["gpu1"] == 1.0 and up["denied"] == 0.0 and len(up) == 3  # local is serve's own host, once
        hosts = [s.labels["host"] for s in families["gpumon_gpu_memory_used_bytes"].samples]
        assert hosts.count("gpu1") == 3 and "denied" not in hosts
        state = json.loads(get(url + "api/state")[2])
        denied = next(h for h in state["hosts"] if h["name"] == "denied")
        assert denied["reason"] == "authentication refused"
    finally:
        stop(proc)


def test_a_live_runs_nan_loss_is_nan_in_metrics_and_counted(tmp_path: Path) -> None:
    """A plain torch script whose loss overflows to inf, then NaN, and goes on stepping: /metrics says NaN (not
    its last finite loss) and counts the non-finite values; the API writes it as the string "nan"."""
    import math

    from tests.conftest import wait_until

    home = tmp_path / "home"
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    script = Path(__file__).parent / "data" / "scripts" / "nonfinite.py"
    launched = subprocess.run(
        [sys.executable, "-m", "gpumon", "launch", "script", str(script), "--", "--steps", "100000", "--step-ms", "50"],
        env=env, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.split()[-1]
    proc, url = start_serve(home, "--simulate", "1")
    try:

        def nan_seen() -> dict | None:
            families = {f.name: f for f in text_string_to_metric_families(get(url + "metrics")[2].decode())}
            counted = [s.value for s in families["gpumon_run_nonfinite_loss"].samples if s.labels["run"] == run_id]
            loss = [s.value for s in families["gpumon_run_loss"].samples if s.labels["run"] == run_id]
            return families if counted and counted[0] >= 2 and loss and math.isnan(loss[0]) else None

        assert wait_until(nan_seen, timeout=120), get(url + "metrics")[2].decode()[-3000:]
        run = json.loads(get(url + f"api/runs/{run_id}")[2])
        assert run["loss"] == "nan" and run["live"] and "nan" in run["loss_note"]
    finally:
        stop(proc)
        subprocess.run([sys.executable, "-m", "gpumon", "stop", run_id], env=env, capture_output=True, timeout=60)
