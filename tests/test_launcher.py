"""The launcher with real subprocesses: runs finish, fail, stop and survive their parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from gpumon.core.events import EventReader
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord, RunStore
from gpumon.core.runs.supervision.ending import root_cause
from gpumon.core.runs.supervision.launcher import launch, stop, wait

SLEEPER = textwrap.dedent(
    """
    import os, signal, sys, time
    if "ignore-term" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("rank", os.environ.get("RANK", "0"), "up", flush=True)
    time.sleep(float(sys.argv[1]))
    print("done", flush=True)
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 0)
    """
)


@pytest.fixture
def store(tmp_path: Path, monkeypatch) -> RunStore:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    return RunStore()


@pytest.fixture
def sleeper(tmp_path: Path) -> Path:
    path = tmp_path / "sleeper.py"
    path.write_text(SLEEPER)
    return path


def start(store: RunStore, script: Path, *args: str, nproc: int = 1, grace_s: float = 10.0) -> RunRecord:
    spec = RunSpec(kind="script", program=str(script), args=args, nproc=nproc)
    return launch(spec, store, visible_gpus=0, grace_s=grace_s)


def run_pids(record: RunRecord) -> set[int]:
    pids = {record.status["supervisor_pid"], record.status["pid"]}
    pids |= {e["pid"] for e in EventReader(record.dir).poll() if e["type"] == "proc_start"}
    return pids


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.Error:
            pass
    return out


def test_a_run_finishes_with_its_log_status_and_launcher_events(store: RunStore, sleeper: Path) -> None:
    record = start(store, sleeper, "0.2")
    assert record.state == "running"
    final = wait(record, store, timeout=20)
    assert final.state == "finished" and final.exit_code == 0
    assert final.log_path(0).read_text().splitlines() == ["rank 0 up", "done"]
    types = [e["type"] for e in EventReader(final.dir).poll()]
    assert types[0] == "run_start" and types[-1] == "run_end"
    assert (store.root.stat().st_mode & 0o777) == 0o700
    assert (final.dir / "status.json").stat().st_mode & 0o077 == 0


def test_a_failing_run_is_failed_with_its_exit_code(store: RunStore, sleeper: Path) -> None:
    final = wait(start(store, sleeper, "0", "3"), store, timeout=20)
    assert final.state == "failed" and final.exit_code == 3


def test_the_run_outlives_the_command_that_started_it_and_a_hangup(tmp_path: Path, sleeper: Path) -> None:
    # gpumon launch in its own session with a hang-up after it exits, as when ssh drops.
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-m", "gpumon", "launch", "script", str(sleeper), "--", "1.5"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        start_new_session=True,
    )
    run_id = out.stdout.split()[-1]
    os.environ["GPUMON_HOME"] = env["GPUMON_HOME"]
    try:
        store = RunStore()
        record = store.resolve(run_id)
        os.killpg(os.getpgid(record.status["supervisor_pid"]), signal.SIGHUP)  # no-op if it ignores it
        assert record.live
        final = wait(record, store, timeout=20)
    finally:
        del os.environ["GPUMON_HOME"]
    assert final.state == "finished"


def test_stop_ends_every_process_of_a_torchrun_run(store: RunStore, sleeper: Path) -> None:
    record = start(store, sleeper, "60", nproc=2)
    # torchrun and its ranks each import torch before they say they started: tens of seconds on a busy machine
    wait_for(lambda: len([e for e in EventReader(record.dir).poll() if e["type"] == "proc_start"]) == 2, timeout=120)
    record = store.load(record.dir)
    assert record is not None
    pids = run_pids(record)
    assert len(pids) == 4  # supervisor, torchrun, two ranks
    assert "stopping" in stop(record)
    final = wait(record, store, timeout=120)  # the run's end (well within its 10 s grace at rest)
    assert final.state == "stopped"
    wait_for(lambda: not alive(pids), timeout=60)
    assert sorted(final.log_ranks()) == [0, 1]


def test_stop_escalates_to_sigkill_after_the_grace_period(store: RunStore, sleeper: Path) -> None:
    record = start(store, sleeper, "60", "ignore-term", grace_s=1.0)
    wait_for(lambda: "up" in record.log_path(0).read_text())
    started = time.monotonic()
    stop(record)
    final = wait(record, store, timeout=20)
    assert final.state == "killed" and final.status["signal"] == "SIGKILL"
    assert 0.9 < time.monotonic() - started < 8
    wait_for(lambda: not alive(run_pids(final)), timeout=5)  # the supervisor exits just after its last write


def test_kill_is_immediate(store: RunStore, sleeper: Path) -> None:
    record = start(store, sleeper, "60", "ignore-term")
    wait_for(lambda: "up" in record.log_path(0).read_text())
    stop(record, kill=True)
    final = wait(record, store, timeout=5)
    assert final.state == "killed"


def test_root_cause_reads_torchruns_error_file_and_report(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "error.json").write_text(
        json.dumps(
            {
                "message": {
                    "message": "RuntimeError: rank one fails",
                    "extraInfo": {"py_callstack": "Traceback ...\nRuntimeError: rank one fails\n", "timestamp": "1"},
                    "errorCode": 1,
                }
            }
        )
    )
    (tmp_path / "logs" / "launcher.log").write_text(
        "Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : -15\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-21_14:46:33\n"
        "  host      : localhost\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 25704)\n"
    )
    error = root_cause(tmp_path)
    assert error == {
        "message": "RuntimeError: rank one fails",
        "traceback": "Traceback ...\nRuntimeError: rank one fails\n",
        "exit_code": 1,
        "rank": 1,
    }
    (tmp_path / "error.json").write_text('{"message": "a newer plain-text format"}')
    assert root_cause(tmp_path)["message"] == "a newer plain-text format"
    (tmp_path / "error.json").write_text("{broken")
    (tmp_path / "logs" / "launcher.log").write_text("")
    assert root_cause(tmp_path) is None


FAILING_RANK = textwrap.dedent(
    """
    import os
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        if os.environ["RANK"] == "1":
            raise ValueError("bad batch on rank one")

    main()
    """
)


def test_a_failing_rank_is_named_with_its_message(store: RunStore, tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(FAILING_RANK)
    final = wait(launch(RunSpec(kind="script", program=str(script), nproc=2), store, 0), store, timeout=60)
    assert final.state == "failed"
    assert final.status["error"]["rank"] == 1
    assert final.status["error"]["message"] == "ValueError: bad batch on rank one"
    exceptions = [e for e in EventReader(final.dir).poll() if e["type"] == "exception"]
    assert [(e["src"], e["message"]) for e in exceptions] == [("rank1", "bad batch on rank one")]


def test_command_and_environment_for_torchrun_kinds(tmp_path: Path) -> None:
    from gpumon.core.runs.supervision.launcher import BOOTSTRAP_DIR, build_command, build_env, other_node_commands

    spec = RunSpec(kind="ddp", nproc=4, gpus="0,1,2,3", max_restarts=2, args=("--preset", "small"))
    argv = build_command(spec, "ddp-x")
    assert argv[1:] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "--max-restarts", "2",
        "-m", "trainers.ddp", "--preset", "small",
    ]  # fmt: skip
    env = build_env(spec, "ddp-x", tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"  # gloo restarts hang without it
    assert env["TORCHELASTIC_ERROR_FILE"] == str(tmp_path / "error.json")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == BOOTSTRAP_DIR
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in build_env(RunSpec(kind="ddp", nproc=2), "x", tmp_path)

    multi = RunSpec(kind="ddp", nproc=8, nnodes=2, rdzv_endpoint="head:29400", args=("--epochs", "9"))
    argv = build_command(multi, "ddp-y")
    assert "--standalone" not in argv
    assert argv[argv.index("--rdzv-endpoint") + 1] == "head:29400"
    assert argv[argv.index("--rdzv-id") + 1] == "ddp-y"
    (other,) = other_node_commands(multi, "ddp-y")
    assert other[:3] == ["gpumon", "launch", "ddp"]
    assert other[other.index("--node-rank") + 1] == "1"
    assert other[other.index("--rdzv-id") + 1] == "ddp-y"  # the same rendezvous on every node
    assert other[-3:] == ["--", "--epochs", "9"]
    assert argv[argv.index("--rdzv-conf") + 1] == "is_host=1"  # node 0 serves the rendezvous store
    script = RunSpec(kind="script", program="train.py", nproc=2, nnodes=2, node_rank=1, rdzv_endpoint="head:29400")
    assert build_command(script, "s")[build_command(script, "s").index("--rdzv-conf") + 1] == "is_host=0"
    (first,) = other_node_commands(script, "s")
    assert first[:4] == ["gpumon", "launch", "script", "train.py"]  # argparse takes the script only there

    pipeline = build_command(RunSpec(kind="pipeline", nproc=2), "p")
    assert pipeline[-4:] == ["-m", "trainers.model_parallel", "--mode", "pipeline"]
    single = build_command(RunSpec(kind="model-parallel", args=("--mode", "naive")), "m")
    assert single[1:] == ["-u", "-m", "trainers.model_parallel", "--mode", "naive"]  # the user's option wins, once
    given = build_command(RunSpec(kind="pipeline", nproc=2, args=("--mode=naive", "--epochs", "1")), "p")
    assert given[-3:] == ["--mode=naive", "--epochs", "1"] and "pipeline" not in given
