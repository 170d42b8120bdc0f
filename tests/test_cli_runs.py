"""launch / runs / logs / stop from the command line, as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_until

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["launch", "ddp", "--nproc", "0"], "argument --nproc: must be at least 1, got 0"),
        (["launch", "ddp", "--nproc", "two"], "argument --nproc: takes a whole number, not 'two'"),
        (["launch", "ddp", "--gpus", "3"], "asked for GPU 3 but this machine shows no GPU"),
        (["launch", "ddp", "--gpus", "a,b"], "GPUs are indexes like 0,1, not 'a,b'"),
        (["launch", "script", "missing.py"], "program not found: missing.py"),
        (["launch", "script"], "script needs a program: gpumon launch script PATH [-- args]"),
        (["launch", "dp", "--nproc", "2"], "dp runs in one process"),
        (["launch", "ddp", "--env", "1X=2"], "environment settings are NAME=VALUE, not '1X=2'"),
        (["launch", "ddp", "--nnodes", "2"], "several nodes need --rdzv-endpoint HOST:PORT"),
        (["launch", "warp"], "argument kind: invalid choice: 'warp'"),
        (["logs", "nope"], "no run 'nope' (see 'gpumon runs' for the ids)"),
        (["stop", "nope"], "no run 'nope' (see 'gpumon runs' for the ids)"),
        (["logs", "last"], "no runs yet: start one with 'gpumon launch ddp'"),
        (["runs", "--", "x"], "'--' only goes with launch"),
        (["launch", "ddp", "--on-alert", "echo X >> f"], "without a shell, so '>>' would only be an argument"),
        (["launch", "ddp", "--on-alert", "notify-send a | tee f"], "so '|' would"),
        (["launch", "ddp", "--on-alert", "date; beep"], "so ';' would"),
        (["launch", "ddp", "--on-alert", "true && beep"], "so '&&' would"),
        (["launch", "ddp", "--on-alert", "echo $(date)"], "so '$(' would"),
        (["launch", "ddp", "--on-alert", "echo 'x"], "--on-alert: No closing quotation"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2_before_anything_starts(gpumon, tmp_path: Path, args, message) -> None:
    done = gpumon(*args)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not list((tmp_path / "home" / "runs").glob("*")) if (tmp_path / "home" / "runs").exists() else True


def test_the_shell_line_that_on_alert_suggests_runs_and_receives_the_alert(tmp_path: Path) -> None:
    from gpumon.cli.launch import alert_command
    from gpumon.core.events import EventWriter
    from gpumon.core.runs.supervision.alerts import raise_alert

    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "launch", "ddp", "--on-alert", "echo X >> f"], capture_output=True, text=True
    )
    suggested = done.stderr.split("e.g. --on-alert '")[1].split("', or")[0]  # as the user would paste it
    out = tmp_path / "alerts.txt"
    command = alert_command(suggested.replace("alerts.txt", str(out)))
    assert command == ("sh", "-c", f"echo $GPUMON_ALERT >> {out}")  # one argument for sh: no shell syntax left
    raise_alert(tmp_path, EventWriter(tmp_path, "test"), "memory leak on rank 1", command)
    assert wait_until(lambda: out.exists() and out.read_text() == "memory leak on rank 1\n", timeout=60)
    assert alert_command("notify-send 'gpumon > alert'") == ("notify-send", "gpumon > alert")  # quoted: a word


def test_launch_runs_logs_and_stop(gpumon, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import sys, time\nprint('args', sys.argv[1:], flush=True)\ntime.sleep(60)\n")
    done = gpumon("launch", "script", "job.py", "--name", "demo", "--", "--lr", "0.1")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    assert "job.py --lr 0.1" in done.stdout

    listed = json.loads(gpumon("runs", "--json").stdout)
    (run,) = listed["runs"]
    assert (run["id"], run["kind"], run["status"], run["program"]) == (run_id, "script", "running", "demo")
    assert Path(run["dir"]).is_dir()
    table = gpumon("runs").stdout
    assert run_id in table and "running" in table

    log = Path(run["dir"]) / "logs" / "rank0.log"  # waited on here: a `gpumon logs` per poll costs a CPU second
    assert wait_until(lambda: log.is_file() and "args" in log.read_text(), timeout=60), run
    assert "args" in gpumon("logs", run_id[:12]).stdout  # a unique prefix is enough
    assert gpumon("logs", run_id).stdout.strip() == "args ['--lr', '0.1']"
    assert "has no rank 3" in gpumon("logs", run_id, "--rank", "3").stderr

    stopped = gpumon("stop", run_id)
    assert stopped.returncode == 0
    assert stopped.stdout.splitlines()[-1] == f"stopped {run_id}"
    assert json.loads(gpumon("runs", "--json").stdout)["runs"][0]["status"] == "stopped"
    assert gpumon("stop", run_id).stdout.strip() == f"{run_id} is not running (stopped)"


def test_a_kinds_default_option_gives_way_to_the_users_own(gpumon) -> None:
    # model-parallel runs --mode micro-batch unless told otherwise: "-- --mode naive" runs naive, said once
    done = gpumon("launch", "model-parallel", "--follow", "--", "--mode", "naive", "--epochs", "1", "--log-every", "50")
    assert done.returncode == 0, done.stderr
    command = next(line for line in done.stdout.splitlines() if line.startswith("command:"))
    assert command.endswith("-m trainers.model_parallel --mode naive --epochs 1 --log-every 50"), command
    assert "model_parallel naive: stage 0 on cpu, stage 1 on cpu" in done.stdout  # what the trainer ran


def test_a_launcher_modules_run_is_named_by_the_script_it_starts(gpumon, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("print('job ran', flush=True)\n")
    args = ("--module", "torch.distributed.run", "--follow", "--", "--standalone", "--nproc-per-node", "1", "job.py")
    done = gpumon("launch", "script", *args)
    assert done.returncode == 0 and "job ran" in done.stdout, done.stdout + done.stderr
    (row,) = json.loads(gpumon("runs", "--json").stdout)["runs"]
    assert row["program"] == "job.py via torchrun", row  # not "torch.distributed.run": which script it ran
    from gpumon.core.runs.record.spec import RunSpec

    as_module = RunSpec("script", program="-m torch.distributed.run", args=("--nproc-per-node", "2", "-m", "pkg.train"))
    assert as_module.label() == "pkg.train via torchrun"
    assert RunSpec("script", program="-m torch.distributed.run", args=("--help",)).label() == "torch.distributed.run"


def test_logs_follow_prints_until_the_run_ends(gpumon, tmp_path: Path) -> None:
    script = tmp_path / "count.py"
    script.write_text("import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.2)\n")
    done = gpumon("launch", "script", "count.py", "--follow")
    assert done.returncode == 0
    assert "line 0\nline 1\nline 2\n" in done.stdout
    assert "finished, exit code 0]" in done.stdout


def test_launch_follow_shows_what_the_run_printed_before_the_follow_began(
    gpumon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a loaded machine the run prints before `launch --follow` looks at its log: those lines are its."""
    from gpumon.cli.common import announce_start
    from gpumon.core.runs.record.store import RunStore

    (tmp_path / "quick.py").write_text("print('early line', flush=True)\n")
    done = gpumon("launch", "script", "quick.py")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    gpumon.wait_ended(run_id)  # all it printed is in its log before the follow begins
    monkeypatch.setenv("GPUMON_HOME", str(gpumon.home))
    assert announce_start(RunStore().resolve(run_id), "run", follow_log=True) == 0
    shown = capsys.readouterr().out
    assert f"early line\n[{run_id} finished, exit code 0]\n" in shown, shown


def test_a_python_without_torch_is_told_how_to_install_it_before_anything_starts(tmp_path: Path) -> None:
    """A newcomer's venv: gpumon and psutil, no torch. `gpumon launch ddp` says what to install, exit 2."""
    import psutil

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    deps = tmp_path / "deps"
    deps.mkdir()
    (deps / "psutil").symlink_to(Path(psutil.__file__).parent)  # what the monitor needs, nothing more
    python = venv / "bin" / "python"
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{deps}", "GPUMON_HOME": str(tmp_path / "home")}
    assert subprocess.run([python, "-c", "import torch"], env=env, capture_output=True).returncode != 0
    for kind in ("ddp", "pipeline"):
        done = subprocess.run(
            [python, "-m", "gpumon", "launch", kind], env=env, capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert f"{kind} runs need torch, which {python} cannot import: pip install torch==" in line
        assert "pip install -e '.[train]'" in line
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())


@pytest.mark.parametrize(
    "args",
    [
        ["launch", "script", "--env", "HF_HUB_OFFLINE=1", "run_clm.py"],  # as it was typed: argparse refused it
        ["launch", "script", "run_clm.py", "--env", "HF_HUB_OFFLINE=1"],
        ["launch", "--env", "HF_HUB_OFFLINE=1", "script", "run_clm.py"],
    ],
)
def test_launch_options_go_before_or_after_the_program(args: list[str]) -> None:
    from gpumon.cli.parser import build_parser

    parsed = build_parser().parse_args(args)
    assert (parsed.kind, parsed.program, parsed.env) == ("script", "run_clm.py", ["HF_HUB_OFFLINE=1"])
