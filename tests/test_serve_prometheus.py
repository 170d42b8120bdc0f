"""Proof with the real things: a real Prometheus scrapes ``gpumon serve`` (with the token, as its config says)
while a plain torch loop launched with ``gpumon launch script`` trains; Prometheus's HTTP API returns the run's
step series, the alert rules in docs/ load, and the run drops out of /metrics once it ended. No secret of the
run's environment or of the alert channels is in any page or metric."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.ports import free_port
from tests.serve_helpers import get, start_serve, stop

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "data" / "scripts" / "plain_torch_loop.py"
RULES = ROOT / "docs" / "grafana" / "gpumon-rules.yml"
TOKEN = "prometheus-token-0123456789abcdef"
SECRET_ENV = "env-secret-value-4242"
SECRET_URL = "https://hooks.example.com/services/T000/B000/webhook-secret-9999"

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="needs a real Prometheus: apt-get install prometheus"
)


def _gpumon(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, cwd=cwd, capture_output=True, text=True)


def _query(prom: str, expr: str) -> list[dict]:
    url = f"{prom}/api/v1/query?query={urllib.parse.quote(expr)}"
    code, _, body = get(url)
    doc = json.loads(body) if code == 200 else {}
    return doc.get("data", {}).get("result", []) if doc.get("status") == "success" else []


def test_prometheus_scrapes_a_zero_code_runs_steps(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f'[alerts]\nwebhook = "{SECRET_URL}"\n')
    (home / "config.toml").chmod(0o600)
    stop_file = tmp_path / "stop"
    launched = _gpumon(
        home, tmp_path, "launch", "script", str(SCRIPT), "--env", f"API_KEY={SECRET_ENV}", "--", str(stop_file)
    )
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.split()[-1]
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    serve, url = start_serve(home, "--simulate", "2", "--token-file", str(token))
    port = free_port()
    config = tmp_path / "prometheus.yml"
    target = urllib.parse.urlsplit(url).netloc
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        "  - job_name: gpumon\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
        f"    authorization: {{type: Bearer, credentials_file: '{token}'}}\n"
    )
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: get(f"{base}/-/ready")[0] == 200 if prom.poll() is None else True, timeout=90)
        assert prom.poll() is None, prom.stderr.read() if prom.stderr else ""
        # the target is up: the token worked
        assert wait_until(lambda: _query(base, 'up{job="gpumon"} == 1'), timeout=60)
        # the run's steps, as a series over time, through Prometheus's own HTTP API
        expr = f'gpumon_run_steps_total{{run="{run_id}"}}'

        def series() -> list[float]:
            end = time.time()
            q = urllib.parse.urlencode({"query": expr, "start": end - 300, "end": end, "step": "1"})
            code, _, body = get(f"{base}/api/v1/query_range?{q}")
            result = json.loads(body)["data"]["result"] if code == 200 else []
            return [float(v) for _, v in result[0]["values"]] if result else []

        steps = wait_until(lambda: (lambda s: s if len(set(s)) >= 3 else None)(series()), timeout=180)
        assert steps, f"no step series for {run_id} in Prometheus"
        assert steps == sorted(steps) and steps[-1] > steps[0]  # a counter that grows
        (sample,) = _query(base, expr)
        assert set(sample["metric"]) == {"__name__", "host", "run", "kind", "instance", "job"}
        assert sample["metric"]["kind"] == "script"
        assert wait_until(lambda: _query(base, f'gpumon_run_loss{{run="{run_id}"}} > 0'), timeout=60)
        assert _query(base, f'gpumon_run_last_step_timestamp_seconds{{run="{run_id}"}} > time() - 120')
        rules = json.loads(get(f"{base}/api/v1/rules")[2])["data"]["groups"]
        assert {r["name"] for g in rules for r in g["rules"]} >= {"GpumonRunStalled", "GpumonRunLossNotFinite"}
        # every panel of the Grafana dashboard in docs/ is a query this Prometheus answers
        dashboard = json.loads((ROOT / "docs" / "grafana" / "gpumon-dashboard.json").read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$host", ".*")
                q = urllib.parse.urlencode({"query": expr})
                code, _, body = get(f"{base}/api/v1/query?{q}")
                assert code == 200 and json.loads(body)["status"] == "success", (panel["title"], body[:300])
        assert _query(base, f'rate(gpumon_run_steps_total{{run="{run_id}"}}[1m]) > 0')
        # serve's own API: the run's loss series, the same run
        auth = {"Authorization": f"Bearer {TOKEN}"}
        run = json.loads(get(url + f"api/runs/{run_id}", auth)[2])
        assert run["live"] and len(run["loss_series"]) >= 2 and run["loss_source"]
        # no secret anywhere serve answers
        for path in ("", "metrics", "api/state", "api/runs", f"api/runs/{run_id}"):
            body = get(url + path, auth)[2].decode()
            assert SECRET_ENV not in body and "hooks.example.com" not in body and TOKEN not in body, path
        # the run ends: it drops out of /metrics
        stop_file.touch()
        assert wait_until(lambda: f'run="{run_id}"' not in get(url + "metrics", auth)[2].decode(), timeout=120)
    finally:
        stop_file.touch()
        prom.terminate()
        prom.wait(timeout=30)
        stop(serve)
