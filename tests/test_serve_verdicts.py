"""serve's page and /api say what ``gpumon doctor`` says of the same run, while it lives and after it ends.

A run's verdict is worked out by serve while the run lives (every ``HEADLINE_EVERY_S``) and was kept as it
was when the run ended: a leak the doctor named in the run's last seconds read "no problem seen" on the page,
right above the run's own leak alert (issue 48)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Gpumon, wait_ended, wait_until
from tests.serve_helpers import get, serving

REPO = Path(__file__).resolve().parents[1]
LEAK = REPO / "trainers" / "examples" / "leak_loss_graph.py"


def test_an_ended_runs_verdict_on_the_page_is_the_doctors_not_the_one_it_had_while_it_lived(
    gpumon: Gpumon, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpumon.serve.state as serve_state

    # The live verdict is worked out once after the first step and not again while the run lives: what the
    # page says after the end can only come from the end.
    monkeypatch.setattr(serve_state, "HEADLINE_EVERY_S", 1e9)
    home = gpumon.home
    launched = gpumon(
        "launch", "script", str(LEAK), "--env", "OMP_NUM_THREADS=1", "--", "--steps", "2000", "--step-ms", "5"
    )
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.split()[-1]
    with serving(home, gpus=1) as (_state, url):

        def api() -> dict:
            return json.loads(get(url + f"api/runs/{run_id}")[2])

        stepped = wait_until(lambda: (doc := api()).get("step") is not None and doc["live"] and doc, timeout=120)
        assert stepped, api()
        live_verdict = stepped["headline"]
        assert "total_loss" not in live_verdict  # the leak is not named yet at the run's first steps
        wait_ended(home, run_id)
        doctor = json.loads(gpumon("doctor", run_id, "--json").stdout)["headline"]
        assert "total_loss" in doctor, doctor  # the doctor names the leak from the ended run's files
        assert wait_until(lambda: api()["headline"] == doctor, timeout=30), (api()["headline"], doctor)
        assert not api()["live"]


def test_the_page_and_metrics_carry_the_runs_tokens_and_mfu_as_gpumon_runs_has_them(gpumon: Gpumon) -> None:
    """A transformer fed token ids (no gpumon code): ``gpumon runs --json`` has its tokens a second and why its MFU
    is unknown on a CPU; /api and /metrics had neither (they read fields the summary does not have)."""
    from prometheus_client.parser import text_string_to_metric_families

    home = gpumon.home
    script = REPO / "tests" / "data" / "scripts" / "flops_models.py"
    args = ("launch", "script", str(script), "--env", "OMP_NUM_THREADS=1", "--", "transformer", "100000")
    launched = gpumon(*args)
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.split()[-1]
    try:
        with serving(home, gpus=1) as (_state, url):

            def api() -> dict:
                return json.loads(get(url + f"api/runs/{run_id}")[2])

            assert wait_until(lambda: api().get("tokens_per_s"), timeout=120), api()
            (row,) = [r for r in json.loads(gpumon("runs", "--json").stdout)["runs"] if r["id"] == run_id]
            doc = api()
            # read a moment apart, a young run's pace moves: each view's tokens a step (tokens/s x s/step) agree
            per_step = row["tokens_per_s"] * row["step_time_s"]
            assert doc["tokens_per_s"] * doc["step_time_s"] == pytest.approx(per_step, rel=1e-6), (doc, row)
            assert doc["flops_per_step"] == row["flops_per_step"] and doc["flops_dtype"] == row["flops_dtype"]
            assert doc["mfu"] is None and row["mfu"] is None and doc["mfu_reason"] == row["mfu_reason"]
            families = {f.name: f for f in text_string_to_metric_families(get(url + "metrics")[2].decode())}

            def gauge(name: str) -> float:
                (value,) = [s.value for s in families[name].samples if s.labels["run"] == run_id]
                return value

            tokens, step_s = gauge("gpumon_run_tokens_per_second"), gauge("gpumon_run_step_time_seconds")
            assert tokens * step_s == pytest.approx(per_step, rel=1e-6)  # one poll's view: the same tokens a step
            assert not [s for s in families["gpumon_run_mfu_ratio"].samples if s.labels["run"] == run_id]
    finally:
        gpumon("stop", run_id, "--kill")
