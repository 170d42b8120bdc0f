"""A two-node DDP run through real OpenSSH: an sshd on 127.0.0.1 and 127.0.0.2 with keys made here.

Skipped, saying why, where sshd is missing or cannot start (install: apt-get install -y openssh-server).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.nodes.group import load_all
from tests.conftest import needs_installed, wait_ended
from tests.ports import free_port

pytest.importorskip("torch")
needs_installed("sklearn")  # the trainers import it, not this process

SSHD = "/usr/sbin/sshd"


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[tuple[int, list[str]]]:
    """A private sshd on a free port; yields (port, the ssh argv that logs in with its key)."""
    if not os.path.exists(SSHD) or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("OpenSSH server or client missing: apt-get install -y openssh-server openssh-client")
    keys = tmp_path / "ssh"
    keys.mkdir(mode=0o700)
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
    shutil.copy(keys / "user.pub", keys / "authorized_keys")
    port = free_port()
    config = keys / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nListenAddress 127.0.0.2\nHostKey {keys / 'host'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\nStrictModes no\n"
        f"UsePAM no\nPidFile {keys / 'sshd.pid'}\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    log = keys / "sshd.log"
    server = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(log)], stdin=subprocess.DEVNULL)
    ssh = ["ssh", "-i", str(keys / "user"), "-o", "StrictHostKeyChecking=no"]
    ssh += ["-o", f"UserKnownHostsFile={keys / 'known_hosts'}", "-o", "LogLevel=ERROR"]
    try:
        deadline = time.monotonic() + 15
        while True:
            probe = subprocess.run(
                [*ssh, "-o", "BatchMode=yes", "-p", str(port), "127.0.0.1", "true"],
                capture_output=True,
                text=True,
                timeout=15,
            )
            if probe.returncode == 0:
                break
            if server.poll() is not None or time.monotonic() > deadline:
                reason = log.read_text()[-300:] if log.exists() else probe.stderr[-300:]
                pytest.skip(f"sshd could not start on 127.0.0.1:{port}: {reason.strip()}")
            time.sleep(0.3)
        yield port, ssh
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_two_node_ddp_run_through_real_ssh(sshd: tuple[int, list[str]], tmp_path: Path) -> None:
    port, ssh = sshd
    remote_home = tmp_path / "remote"
    config = tmp_path / "config"
    config.mkdir()
    # A login shell's PATH lacks this venv: the fleet config names the gpumon to run there, as a user's would.
    gpumon = f"env GPUMON_HOME={remote_home} CUDA_VISIBLE_DEVICES= {sys.executable} -m gpumon"
    (config / "config.toml").write_text(f"[fleet]\ngpumon = {json.dumps(gpumon)}\n")
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "launcher"), "GPUMON_CONFIG_DIR": str(config)}
    env["GPUMON_SSH"] = " ".join(ssh)
    hosts = f"127.0.0.1:{port},127.0.0.2:{port}"

    def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gpumon", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)

    done = gpumon("launch", "ddp", "--hosts", hosts, "--nproc", "1", "--", "--epochs", "2")
    assert done.returncode == 0, done.stderr
    # Until each node's supervisor wrote its end, read in its files (both hosts are this machine: one state dir);
    # polling `gpumon runs` asked each node through ssh every second, taken from the run's own CPU time.
    (launched,) = load_all(tmp_path / "launcher")
    wait_ended(remote_home, *(node.run for node in launched.nodes), timeout=240)
    (group,) = json.loads(gpumon("runs", "--json").stdout)["groups"]
    assert group["state"] == "finished", json.dumps(group, indent=1)
    assert group["rdzv_endpoint"].startswith("127.0.0.1:")  # the first host's address as given
    for node in group["nodes"]:
        assert node["state"] == "finished" and node["step"] >= 20 and node["loss"] is not None
