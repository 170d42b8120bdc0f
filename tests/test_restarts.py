"""Issue 51, point 2: a run torchrun restarted (``--max-restarts``) is told as such everywhere: which rank failed, with
what and where, the steps redone and the time lost, "attempt 2 of 2" in the row, an alert when it happens, the
restarts in /metrics, and "finished after 1 restart" at the end, never "no problem seen".

A real torchrun, two gloo ranks on the CPU: in the first attempt rank 1 raises "corrupt record in shard 7"; the
second resumes from the script's own checkpoint and says so. Every figure is checked against what the script
printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Gpumon, wait_until
from tests.serve_helpers import get, start_serve, stop

SCRIPT = Path(__file__).parent / "data" / "scripts" / "restarts.py"


def _restarts_in_metrics(url: str, run_id: str) -> float | None:
    for family in text_string_to_metric_families(get(url + "metrics")[2].decode()):
        if family.name == "gpumon_run_restarts":
            return next((s.value for s in family.samples if s.labels["run"] == run_id), None)
    return None


def test_a_torchrun_restart_is_told_in_the_row_the_alert_metrics_json_and_the_doctor(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    # 80 ms a step: the failed attempt's 26 steps span two of the bar's reports (a second apart), so its start is known
    launched = gpumon(
        "launch", "script", str(SCRIPT), "--nproc", "2", "--max-restarts", "1", "--json",
        "--", "--hold", str(hold), "--ckpt", str(tmp_path / "ckpt.txt"), "--step-ms", "80",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    run_id = json.loads(launched.stdout)["id"]
    run_dir = gpumon.home / "runs" / run_id
    alerts = run_dir / "alerts.jsonl"
    try:
        # the alert, raised by the supervisor when the second attempt's ranks report (no app open)
        assert wait_until(lambda: alerts.exists() and "restart: " in alerts.read_text(), timeout=120)
        (alert,) = [a for a in map(json.loads, alerts.read_text().splitlines()) if a.get("kind") == "restart"]
        assert re.fullmatch(
            r"restart: attempt 2 of 2 started after rank 1 raised RuntimeError: corrupt record in shard 7 "
            r"\(restarts\.py:\d+ in <module>\) in attempt 1, after \d+ steps",
            alert["text"],
        ), alert["text"]
        row = next(line for line in gpumon("runs").stdout.splitlines() if line.startswith(run_id))
        assert "running, attempt 2 of 2" in row, row
        proc, url = start_serve(gpumon.home, "--simulate", "1")
        try:
            assert wait_until(lambda: _restarts_in_metrics(url, run_id) == 1.0, timeout=60), get(url + "metrics")[2]
        finally:
            stop(proc)
    finally:
        hold.touch()
    gpumon.wait_ended(run_id)
    printed = "\n".join(p.read_text() for p in (run_dir / "logs").glob("*.log"))
    failed_at = int(re.search(r"failed at step (\d+)", printed).group(1))  # type: ignore[union-attr]
    resumed_at = int(re.search(r"resumed at step (\d+)", printed).group(1))  # type: ignore[union-attr]

    (doc,) = [d for d in json.loads(gpumon("runs", "--json").stdout)["runs"] if d["id"] == run_id]
    assert doc["status"] == "finished" and doc["attempt"] == 2
    (told,) = doc["restarts"]
    assert (told["attempt"], told["rank"], told["what"]) == (1, 1, "raised RuntimeError: corrupt record in shard 7")
    assert told["where"].startswith("restarts.py:") and str(failed_at) in alert["text"]
    assert told["steps"] == failed_at  # the optimizer steps the failed attempt took, as the script counted them
    assert told["redone"] == failed_at - resumed_at  # from its checkpoint to where it failed, done again
    assert 0 < told["gap_s"] <= told["lost_s"] and not told["lost_so_far"]

    row = next(line for line in gpumon("runs").stdout.splitlines() if line.startswith(run_id))
    assert "finished after 1 restart" in row, row
    diagnosis = json.loads(gpumon("doctor", run_id, "--json").stdout)
    assert diagnosis["headline"].startswith("finished after 1 restart: attempt 1 failed after"), diagnosis["headline"]
    assert diagnosis["restarts"] == doc["restarts"]
    text = gpumon("doctor", run_id).stdout
    assert f"{failed_at - resumed_at} steps redone" in text and "no problem seen" not in text, text


@pytest.mark.parametrize(
    ("how", "said"),
    [(["--kill"], "was killed by SIGKILL (exit -9)"), (["--exit", "3"], "exited with code 3")],
    ids=["sigkill", "sys.exit(3)"],
)
def test_a_rank_killed_or_exiting_in_the_first_attempt_is_named_from_torchruns_log_not_its_peer(
    gpumon: Gpumon, tmp_path: Path, how: list[str], said: str
) -> None:
    """Rank 1 is SIGKILLed, or calls sys.exit(3): no exception of its own. Rank 0 then raises gloo's "Connection
    closed by peer", or is SIGTERMed by torchrun first and says nothing at all. torchrun's own log line names rank
    1's pid and exit code: the restart, its alert and the doctor name rank 1 and how it ended."""
    launched = gpumon(
        "launch", "script", str(SCRIPT), "--nproc", "2", "--max-restarts", "1", "--json",
        "--", *how, "--ckpt", str(tmp_path / "ckpt.txt"), "--step-ms", "80",
    )  # fmt: skip
    run_id = json.loads(launched.stdout)["id"]
    gpumon.wait_ended(run_id)
    (doc,) = [d for d in json.loads(gpumon("runs", "--json").stdout)["runs"] if d["id"] == run_id]
    (told,) = doc["restarts"]
    assert (told["rank"], told["what"]) == (1, said), told
    assert doc["status"] == "finished" and told["redone"] is not None
    alerts = (gpumon.home / "runs" / run_id / "alerts.jsonl").read_text().splitlines()
    (alert,) = [a["text"] for a in map(json.loads, alerts) if a.get("kind") == "restart"]
    assert alert.startswith(f"restart: attempt 2 of 2 started after rank 1 {said} in attempt 1, after "), alert
    assert f"rank 1 {said}" in json.loads(gpumon("doctor", run_id, "--json").stdout)["headline"]


LINE = (
    b"E1206 19:46:36.789000 4248 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) "
    b"local_rank: 1 (pid: 4252) of binary: /usr/bin/python3\n"
)


def test_torchruns_line_is_read_once_as_the_log_grows_even_behind_a_flood(tmp_path: Path) -> None:
    """The supervisor follows launcher.log from its offset: a line half written is read when it ends, never twice,
    and a flood before it is caught up a bounded chunk a poll."""
    from gpumon.core.events import EventReader, EventWriter
    from gpumon.core.runs.supervision.worker_exits import POLL_BYTES, WorkerExits

    (tmp_path / "logs").mkdir()
    log, events = tmp_path / "logs" / "launcher.log", EventWriter(tmp_path, "launcher")
    follow = WorkerExits(tmp_path)
    log.write_bytes(b"x" * 100 + b"\n" + (b"y" * 99 + b"\n") * (3 * POLL_BYTES // 100) + LINE[:60])
    assert follow.poll(events) == 0 and follow.offset == POLL_BYTES  # one bounded chunk a poll
    assert [follow.poll(events) for _ in range(3)] == [0, 0, 0]
    with log.open("ab") as f:
        f.write(LINE[60:] + b"[default0]:a rank's own words: failed (exitcode: 1)\n")
    assert follow.poll(events) == 1 and follow.poll(events) == 0
    (exit,) = [e for e in EventReader(tmp_path).poll() if e["type"] == "worker_exit"]
    assert (exit["worker_pid"], exit["local_rank"], exit["exitcode"], exit["signal"]) == (4252, 1, -9, "SIGKILL")
