"""A real sshd on 127.0.0.1 with keys made for the occasion: for the tests through real OpenSSH and the benches.

``start_sshd(DIR)`` writes the keys and the config into DIR and starts sshd as a daemon (it needs root and
openssh-server); the sessions' ``GPUMON_HOME`` is DIR/state. It returns why not, in words, where it cannot.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import wait_until
from tests.ports import free_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class Sshd:
    port: int
    key: Path
    wrong_key: Path
    known_hosts: Path
    home: Path  # GPUMON_HOME of the sessions
    pid: int = 0

    def ssh(self, key: Path | None = None) -> list[str]:
        return [
            *("ssh", "-F", "/dev/null", "-i", str(key or self.key), "-o", "IdentitiesOnly=yes"),
            *("-o", "StrictHostKeyChecking=no", "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "LogLevel=ERROR"),
        ]

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGTERM)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def start_sshd(tmp: Path) -> Sshd | str:
    """A started sshd, or why none could start."""
    if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "no OpenSSH server here: apt-get install -y openssh-server"
    for name in ("host_key", "user_key", "wrong_key"):
        _keygen(tmp / name)
    (tmp / "authorized_keys").write_text((tmp / "user_key.pub").read_text())
    port = free_port()
    config = tmp / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host_key'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\n"
        f"PidFile {tmp / 'sshd.pid'}\nSetEnv GPUMON_HOME={tmp / 'state'}\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    started = subprocess.run([SSHD, "-f", str(config), "-E", str(tmp / "sshd.log")], capture_output=True, text=True)
    pid_file = tmp / "sshd.pid"  # sshd creates it, then writes its pid: an empty file is not yet a pid
    if started.returncode != 0 or not wait_until(lambda: _read_pid(pid_file) is not None, timeout=10):
        return f"sshd did not start: {started.stderr.strip() or (tmp / 'sshd.log').read_text()[-300:]}"
    pid = _read_pid(pid_file)
    assert pid is not None
    return Sshd(port, tmp / "user_key", tmp / "wrong_key", tmp / "known_hosts", tmp / "state", pid)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None
