"""A mistyped config.toml is one line and exit 2 before any run is made, never a lost run; a FIFO there never
blocks; a config broken under a live run leaves the run on what its supervisor read at its start (issue 49)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.alert_receiver import Receiver
from tests.conftest import wait_ended, wait_until

FAILS = 'import sys\nsys.exit("the shard index is corrupt")\n'


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "GPUMON_CONFIG_DIR": str(tmp_path / "cfg"),
            "CUDA_VISIBLE_DEVICES": ""}  # fmt: skip


def _gpumon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpumon", *args], env=_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _write(cfg: Path, content: str | bytes) -> None:
    cfg.mkdir(exist_ok=True)
    path = cfg / "config.toml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    path.chmod(0o600)


MISTAKES = {
    "log_cap": ('[runs]\nlog_cap = "abc"\n', ['log_cap = "abc"', "64 MiB"]),
    "broken_toml": ("[runs\nlog_cap = 1\n", ["not valid TOML"]),
    "not_utf8": (b'[alerts]\nwebhook = "http://\xff\xfe"\n', ["not UTF-8"]),
    "unknown_key": ('[runs]\nlog_kap = "1 MiB"\n', ["unknown key 'log_kap'", "log_cap"]),
    "unknown_table": ('[run]\nlog_cap = "1 MiB"\n', ["unknown table [run]", "[runs]"]),
    "stall": ("[runs]\nstall_after = -3\n", ["stall_after = -3"]),
    "queue": ('[queue]\nsettle = "soon"\n', ["[queue] settle = 'soon'"]),
    "alerts": ('[alerts]\nwebhook = "ftp://x"\n', ["[alerts]", "webhook"]),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_config_mistake_is_one_line_naming_the_file_and_no_run_is_made(tmp_path: Path, name: str) -> None:
    content, words = MISTAKES[name]
    _write(tmp_path / "cfg", content)
    (tmp_path / "train.py").write_text("print('trained')\n")
    done = _gpumon(tmp_path, "launch", "script", "train.py")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "cfg" / "config.toml") in lines[0], done.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert "starting" not in done.stdout and not list((tmp_path / "home").glob("runs/*/spec.json"))
    # a command that never reads config.toml still works, so the user can look at their runs
    assert _gpumon(tmp_path, "runs").returncode == 0


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_config_that_is_no_file_is_one_line_and_never_blocks(tmp_path: Path, kind: str) -> None:
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    if kind == "directory":
        (cfg / "config.toml").mkdir()
    else:
        os.mkfifo(cfg / "config.toml")  # nobody writes it: an open() without O_NONBLOCK would wait for ever
    (tmp_path / "train.py").write_text("print('trained')\n")
    for args in (("launch", "script", "train.py"), ("alerts",), ("serve", "--port", "0")):
        done = _gpumon(tmp_path, *args)  # within the 60 s timeout, or subprocess raises
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert "not a regular file" in done.stderr or "is a directory" in done.stderr


def test_a_config_broken_under_a_live_run_leaves_the_run_on_what_it_had(tmp_path: Path) -> None:
    receiver = Receiver().start()
    go = tmp_path / "go"
    try:
        _write(tmp_path / "cfg", f'[alerts]\nwebhook = "{receiver.url}"\n')
        (tmp_path / "job.py").write_text(
            f"import os, sys, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n{FAILS}"
        )
        done = _gpumon(tmp_path, "launch", "script", "job.py")
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.split()[-1]
        run_dir = tmp_path / "home" / "runs" / run_id
        assert wait_until(
            lambda: (run_dir / "status.json").exists() and b"running" in (run_dir / "status.json").read_bytes(), 60
        )
        _write(tmp_path / "cfg", '[runs]\nlog_cap = "abc"\n[alerts]\nwebhook = 3\n')  # broken under the run
        go.touch()
        wait_ended(tmp_path / "home", run_id, timeout=120)
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] == "failed", status  # its end recorded: not lost
        # The failure's alert still went to the webhook the supervisor read at the run's start.
        assert wait_until(lambda: receiver.arrived, timeout=60), "the alert was lost with the config"
        assert receiver.arrived[0]["run"] == run_id
    finally:
        receiver.stop()
