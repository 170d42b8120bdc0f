"""Ranks that the script spawns itself (torch.multiprocessing.spawn, gloo, CPU) are ranks everywhere: the run's
row and detail count and list them with their steps, ``gpumon logs RUN --rank 1`` shows the output rank 1 shares,
and a hung run's doctor puts the stall's fix first with a command that works. Real runs through
``gpumon launch script``; the stall rule's minimum is 4 s here (``GPUMON_STALL_AFTER``)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_ended, wait_state, wait_until
from tests.ports import free_port

SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"
Cli = Callable[..., subprocess.CompletedProcess[str]]

pytest.importorskip("torch")


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": "", "GPUMON_STALL_AFTER": "4"}
    env.pop("GPUMON_RUN_DIR", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, cwd=tmp_path
        )

    run.home = tmp_path / "home"  # type: ignore[attr-defined]
    return run


@pytest.fixture
def launched(cli: Cli) -> Iterator[Callable[..., str]]:
    """Start spawned_ranks.py as a run; every run is stopped at the end, whatever the test's outcome."""
    ids: list[str] = []

    def launch(*args: str) -> str:
        done = cli("launch", "script", str(SCRIPTS / "spawned_ranks.py"), "--", str(free_port()), *args)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.split()[-1])
        return ids[-1]

    yield launch
    for run_id in ids:
        cli("stop", run_id)


def row(cli: Cli, run_id: str) -> dict[str, Any]:
    return next(r for r in json.loads(cli("runs", "--json").stdout)["runs"] if r["id"] == run_id)


def printed(log: str, pattern: str) -> dict[int, int]:
    """rank -> the number the script printed after it (its pid, its last step)."""
    return {int(rank): int(value) for rank, value in re.findall(pattern, log)}


def test_spawned_ranks_are_two_ranks_with_their_steps_and_rank_1s_log_is_the_shared_one(
    cli: Cli, launched: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = launched("40")
    wait_ended(cli.home, run_id, timeout=240)  # type: ignore[attr-defined]
    ended = row(cli, run_id)
    assert ended and ended["status"] == "finished", ended
    log = (Path(ended["dir"]) / "logs" / "rank0.log").read_text()
    pids = printed(log, r"\[rank (\d)\] pid (\d+) up")
    assert printed(log, r"\[rank (\d)\] done after (\d+) steps") == {0: 40, 1: 40}
    for listed in (ended, row(cli, run_id)):  # read from the run's files, then from the index
        assert listed["nproc"] == 2, listed
        ranks = [(r["rank"], r["pid"], r["step"], r["started"]) for r in listed["ranks"]]
        assert ranks == [(0, pids[0], 40, "multiprocessing spawn"), (1, pids[1], 40, "multiprocessing spawn")]
        assert all(r["host"] for r in listed["ranks"])

    one = cli("logs", run_id, "--rank", "1", "-n", "200")
    assert one.returncode == 0, one.stderr
    assert f"[rank 1] pid {pids[1]} up" in one.stdout and "[rank 1] done after 40 steps" in one.stdout
    note = "rank 1 shares its output with rank 0 (spawned by the script): showing the run's log"
    assert one.stderr.strip() == f"gpumon: {note}"
    none = cli("logs", run_id, "--rank", "5")
    assert none.returncode == 2 and "has no rank 5; its ranks: 0, 1" in none.stderr

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    asyncio.run(shows_ranks_in_the_detail(run_id))


async def shows_ranks_in_the_detail(run_id: str) -> None:
    """The Runs view's detail: 2 proc, each rank's step, and a log pane that says whose output it holds."""
    from tests.conftest import make_app
    from tests.test_runs_view import info, log_title, open_runs, select

    app = make_app(gpus=1)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_runs(pilot, 1)
        await select(pilot, run_id)
        assert " · 2 proc" in info(app) and "\nranks: 0 at step 40 · 1 at step 40" in info(app), info(app)
        await log_title(pilot, "log · ranks 0, 1 (one shared output)")


def test_a_hung_spawned_ddp_run_gets_the_stalls_fix_first_and_its_logs_command_works(
    cli: Cli, launched: Callable[..., str]
) -> None:
    run_id = launched("100000", "--hang-at", "6")
    wait_state(cli.home / "runs" / run_id, "stalled", timeout=240)  # type: ignore[attr-defined]
    stalled = wait_until(lambda: (r := row(cli, run_id))["status"] == "stalled" and r, timeout=30, step=1)
    assert stalled and stalled["stall"]["blame"] == [1], stalled
    assert stalled["nproc"] == 2 and [(r["rank"], r["step"]) for r in stalled["ranks"]] == [(0, 5), (1, 5)]

    doctor = json.loads(cli("doctor", run_id, "--json").stdout)
    keys = [a["key"] for a in doctor["advice"]]
    assert "threads" in keys, doctor  # the ranks are oversubscribed too: that fix comes after the stall's
    first = doctor["advice"][0]
    assert first["key"] == "stalled_rank" and first["title"] == "Look at rank 1: it never reached the collective"
    [command] = re.findall(r"gpumon logs \S+ --rank \d+", first["change"])
    assert command == f"gpumon logs {run_id} --rank 1"
    advised = cli(*command.split()[1:])  # as the user would paste it
    assert advised.returncode == 0, advised.stderr
    assert "[rank 1] pid " in advised.stdout and "shares its output with rank 0" in advised.stderr
    text = cli("doctor", run_id).stdout
    assert "  1. Look at rank 1: it never reached the collective" in text, text
