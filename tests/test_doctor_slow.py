"""Runs that train slowly: waiting on their DataLoader, or more torch threads than CPUs. Real runs through
``gpumon launch script``; what a user reads in ``gpumon runs --json`` and ``gpumon doctor --json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Gpumon
from tests.ports import free_port

SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"

pytest.importorskip("torch")


def launch(gpumon: Gpumon, script: str, *args: str) -> str:
    done = gpumon("launch", "script", str(SCRIPTS / script), "--", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def ended_rows(gpumon: Gpumon, *run_ids: str) -> dict[str, dict]:
    gpumon.wait_ended(*run_ids)
    found = {r["id"]: r for r in json.loads(gpumon("runs", "--json").stdout)["runs"]}
    assert all(found.get(i, {}).get("status") in ("finished", "failed") for i in run_ids), found
    return found


def test_an_input_bound_loop_is_flagged_with_its_fix_and_its_fixed_twin_is_not(gpumon: Gpumon) -> None:
    slow = launch(gpumon, "input_bound.py", "--workers", "0", "--steps", "60")  # ~0.17 s a step
    fixed = launch(gpumon, "input_bound.py", "--workers", "4", "--steps", "160")  # ~0.04 s a step
    rows = ended_rows(gpumon, slow, fixed)
    assert rows[slow]["status"] == rows[fixed]["status"] == "finished"

    row = rows[slow]
    assert row["data_wait_share"] >= 0.5, row  # 16 x 8 ms of waiting against 40 ms of work: about 75%
    [warning] = [w for w in row["warnings"] if w.startswith("input-bound")]
    assert "waits for data (DataLoader num_workers=0, batch 16)" in warning
    assert any(a.startswith("input-bound") for a in row["alerts"]), row["alerts"]  # the alert, once
    doctor = json.loads(gpumon("doctor", slow, "--json").stdout)
    assert doctor["headline"].startswith("input-bound: ")
    first, second = doctor["advice"][:2]
    assert first["key"] == "num_workers" and "num_workers=0 now" in first["title"], first
    assert "DataLoader(..., num_workers=" in first["change"]
    getitem = next(
        i for i, text in enumerate((SCRIPTS / "decoded.py").read_text().splitlines(), 1) if "def __getitem__" in text
    )
    assert second["key"] == "decode" and f"Decoded.__getitem__ at decoded.py:{getitem}" in second["why"], second

    twin = rows[fixed]
    assert twin["data_wait_share"] is not None and twin["data_wait_share"] < 0.5, twin
    assert twin["warnings"] == [] and twin["alerts"] == [], twin
    calm = json.loads(gpumon("doctor", fixed, "--json").stdout)
    assert calm["slow"] == [] and not any(a["key"] == "num_workers" for a in calm["advice"]), calm


def test_two_spawned_ranks_with_a_thread_per_cpu_each_are_oversubscribed(gpumon: Gpumon) -> None:
    # a few steps: the finding is the ranks' thread counts against the CPUs (their `threads` events), not a pace
    run_id = launch(gpumon, "crowded_ranks.py", str(free_port()), "40")
    row = ended_rows(gpumon, run_id)[run_id]
    logs = {p.name: p.read_text(errors="replace")[-1500:] for p in Path(row["dir"], "logs").glob("*.log")}
    assert row["status"] == "finished", (row, logs)  # a rank once died of a signal in CI: its logs say which
    [warning] = [w for w in row["warnings"] if w.startswith("CPU oversubscribed")]
    assert "2 ranks run " in warning and "torch threads on" in warning, warning
    doctor = json.loads(gpumon("doctor", run_id, "--json").stdout)
    assert warning in [found["text"] for found in doctor["slow"]]
    # The headline is the slowness unless memory that would fill within 24 h at the run's pace comes first (a
    # few hundred bytes a step, sometimes seen in 300 steps within a second, where no pace is known).
    warned = [m for m in doctor["memory"].values() if m["warning"]]
    assert doctor["headline"] == warning or (warned and doctor["headline"].startswith("memory growing")), doctor
    [threads] = [a for a in doctor["advice"] if a["key"] == "threads"]
    assert "OMP_NUM_THREADS=" in threads["change"] and "torch.set_num_threads(" in threads["change"]
