"""``gpumon fleet`` and ``gpumon logs --host`` as a user runs them, hosts through the ssh stand-in."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpumon.core.fleet.reasons import UNKNOWN_NAME
from tests.conftest import wait_until
from tests.test_fleet_links import stand_in


def gpumon(tmp_path: Path, *args: str, ssh: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "PYTHONDONTWRITEBYTECODE": "1", "GPUMON_CONFIG_DIR": str(tmp_path / "cfg")}
    env["GPUMON_HOME"] = str(tmp_path / "here")
    env.pop("GPUMON_SSH", None)
    if ssh is not None:
        env["GPUMON_SSH"] = ssh
    argv = [sys.executable, "-m", "gpumon", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def test_fleet_json_gives_every_host_its_state_and_gpus(tmp_path: Path) -> None:
    ssh = shlex.join(stand_in(tmp_path / "hosts"))
    result = gpumon(tmp_path, "fleet", "--hosts", "local,gpu1,denied", "--json", "--simulate", "4", ssh=ssh)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [(h["name"], h["link"]) for h in doc["hosts"]] == [("local", "live"), ("gpu1", "live"), ("denied", "down")]
    assert doc["gpus"] == 6 and 0 <= doc["idle_gpus"] <= 6
    assert doc["hosts"][2]["reason"] == "authentication refused"
    assert doc["hosts"][1]["snapshot"]["fields"] == "fleet" and doc["hosts"][1]["runs"] == []


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH's client is not installed")
def test_an_unknown_host_name_reads_as_ssh_says_it_not_unreachable(tmp_path: Path) -> None:
    result = gpumon(tmp_path, "fleet", "--hosts", "nosuchhost.invalid", "--json")  # .invalid never resolves
    assert result.returncode == 0, result.stderr
    host = json.loads(result.stdout)["hosts"][0]
    assert host["link"] == "down" and host["reason"].startswith(f"{UNKNOWN_NAME} (ssh: ")
    assert "nosuchhost.invalid" in host["reason"] and host["detail"] in host["reason"]  # ssh's own line
    table = gpumon(tmp_path, "fleet", "--hosts", "nosuchhost.invalid")
    assert "host name not resolved (ssh: Could not resolve hostname nosuchhost.invalid" in table.stdout
    launch = gpumon(tmp_path, "launch", "ddp", "--hosts", "nosuchhost.invalid,local", "--nproc", "1")
    assert launch.returncode == 2 and "nosuchhost.invalid: host name not resolved (ssh: " in launch.stderr


def test_fleet_table_reads_hosts_and_ssh_from_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    ssh = shlex.join(stand_in(tmp_path / "hosts", gpus=3))
    (tmp_path / "cfg" / "config.toml").write_text(f'[fleet]\nhosts = ["gpu1", "bare"]\nssh = {json.dumps(ssh)}\n')
    result = gpumon(tmp_path, "fleet")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["HOST", "LINK", "LATENCY", "GPUS", "IDLE", "HOST", "CPU", "NOTE"]
    assert lines[1].split()[:2] == ["gpu1", "live"] and lines[1].split()[4] == "3"  # LATENCY is "N ms"
    assert lines[2].startswith("bare") and "gpumon is not installed there: pip install gpumon" in lines[2]
    assert sum(line.startswith("gpu1 ") for line in lines) == 4  # its host row and one row per GPU
    assert lines[-1].endswith("of 3 GPUs idle")


def test_mistakes_in_hosts_or_ssh_are_one_line_and_exit_2_before_any_ssh(tmp_path: Path) -> None:
    cases: list[tuple[list[str], str | None, str]] = [
        (["fleet", "--hosts", "gpu 1"], None, "a host name has letters"),
        (["fleet", "--hosts", "gpu1:99999"], None, "port must be a number"),
        (["fleet", "--hosts", "gpu1", "--ssh", "ssh -o 'unclosed"], None, "quote it as in a shell"),
        (["fleet", "--hosts", "gpu1"], "no-such-ssh-program -p 2", "'no-such-ssh-program' not found"),
        (["fleet"], None, "no hosts: give --hosts"),
        (["--hosts=-oProxyCommand=x", "fleet"], None, "a host name has letters"),
        (["logs", "last", "--host", "bad host"], None, "a host name has letters"),
    ]
    for args, ssh, expected in cases:
        result = gpumon(tmp_path, *args, ssh=ssh)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and expected in result.stderr, (args, result.stderr)
        assert result.stdout == ""
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text('[fleet]\nhosts = "gpu1"\n')
    result = gpumon(tmp_path, "fleet")
    assert result.returncode == 2 and "hosts must be a list of strings" in result.stderr


def _remote_runs(tmp_path: Path, host: str) -> list[dict[str, Any]]:
    argv = [*stand_in(tmp_path / "hosts"), host, "gpumon runs --json"]
    return list(json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)["runs"])


def test_logs_of_a_run_on_another_host_through_ssh(tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import time\nfor i in range(3):\n    print(f'hello from the host {i}', flush=True)\n")
    ssh = stand_in(tmp_path / "hosts")
    launch = subprocess.run(
        [*ssh, "gpu1", shlex.join(["gpumon", "launch", "script", str(script)])],
        capture_output=True,
        text=True,
        check=True,
    )
    run_id = launch.stdout.split()[-1]
    assert wait_until(
        lambda: [r["status"] for r in _remote_runs(tmp_path, "gpu1")] == ["finished"], timeout=60, step=0.3
    )
    result = gpumon(tmp_path, "logs", run_id, "--host", "gpu1", ssh=shlex.join(ssh))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"hello from the host {i}" for i in range(3)]
    follow = gpumon(tmp_path, "logs", run_id[:6], "--host", "gpu1", "--follow", ssh=shlex.join(ssh))
    assert "hello from the host 2" in follow.stdout and f"[{run_id} finished, exit code 0]" in follow.stdout
    here = gpumon(tmp_path, "logs", run_id, ssh=shlex.join(ssh))  # not on this machine
    assert here.returncode == 2 and "no run" in here.stderr.lower()
    missing = gpumon(tmp_path, "logs", "nope", "--host", "gpu1", ssh=shlex.join(ssh))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope" in missing.stderr
    denied = gpumon(tmp_path, "logs", run_id, "--host", "denied", ssh=shlex.join(ssh))
    assert denied.returncode == 2 and denied.stderr.startswith("gpumon: error: denied: authentication refused")
    bare = gpumon(tmp_path, "logs", run_id, "--host", "bare", ssh=shlex.join(ssh))
    assert bare.returncode == 2 and "gpumon is not installed there" in bare.stderr


def test_the_fleet_reads_a_remote_hosts_runs_with_their_pids_while_live(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    ssh = stand_in(tmp_path / "hosts")
    launch = subprocess.run(
        [*ssh, "gpu1", shlex.join(["gpumon", "launch", "script", str(script)])], capture_output=True, text=True
    )
    run_id = launch.stdout.split()[-1]
    try:
        result = gpumon(tmp_path, "fleet", "--hosts", "gpu1", "--json", ssh=shlex.join(ssh))
        runs = json.loads(result.stdout)["hosts"][0]["runs"]
        assert [(r["id"], r["status"]) for r in runs] == [(run_id, "running")]
        assert runs[0]["pids"] and all(isinstance(pid, int) for pid in runs[0]["pids"])
    finally:
        subprocess.run([*ssh, "gpu1", f"gpumon stop {run_id} --kill"], capture_output=True, check=False)
