"""A stand-in for ``ssh`` that runs the remote command on this machine, one "host" per folder.

    python tests/fleet_ssh.py --root DIR [--gpus N] [ssh's options] [--] [user@]HOST COMMAND

It takes ssh's options as ssh does (and ignores them), then runs COMMAND with ``sh -c`` as sshd's login
shell would, with the host's own state dir (GPUMON_HOME=DIR/HOST/state) and a ``gpumon`` on its PATH
that shows N simulated GPUs with a seed made from the host name, so hosts differ. Some hosts fail the
way real ones do, with ssh's exit status 255 and its own stderr texts:

    denied     authentication refused            nowhere    the name does not resolve
    bare       no gpumon installed (sh: exit 127)  old        an older gpumon whose lines this one cannot read
    DIR/HOST/down exists: connection refused (the host is down until the file goes)
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

# ssh's options that take a value (from its getopt string); the rest are flags.
_WITH_VALUE = set("bcDEeFIiJLlmOopQRSWw") - {"?"}
_OLD_GPUMON = """#!/bin/sh
while :; do echo '{"schema": 0, "version": "0.0.9", "devices": []}' || exit 0; sleep 0.5; done
"""


def _split(argv: list[str]) -> tuple[dict[str, str], str, str]:
    """(our options, [user@]host, the remote command)."""
    ours: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] in ("--root", "--gpus"):
        ours[argv[i][2:]] = argv[i + 1]
        i += 2
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        letter = word[1:2]
        i += 1 if letter not in _WITH_VALUE or len(word) > 2 else 2
    if i >= len(argv):
        sys.exit("usage: fleet_ssh.py --root DIR [--gpus N] [ssh options] [--] host command")
    return ours, argv[i], " ".join(argv[i + 1 :])


def _fail(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.exit(255)


def main() -> None:
    ours, target, command = _split(sys.argv[1:])
    user, _, host = target.rpartition("@")
    user = user or os.environ.get("USER", "root")
    if host == "denied":
        _fail(f"{user}@{host}: Permission denied (publickey,password).")
    if host == "nowhere":
        _fail(f"ssh: Could not resolve hostname {host}: Name or service not known")
    home = Path(ours["root"]) / host
    if (home / "down").exists():
        _fail(f"ssh: connect to host {host} port 22: Connection refused")
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = os.environ.get("PATH", "/usr/bin:/bin")
    # no gpumon on this host's PATH: take the venv's directory out of it
    path = os.pathsep.join(p for p in path.split(os.pathsep) if not (Path(p) / "gpumon").exists())
    if host != "bare":
        script = bin_dir / "gpumon"
        if host == "old":
            text = _OLD_GPUMON
        else:
            seed = zlib.crc32(host.encode()) % 1000
            gpus = ours.get("gpus", "8")
            text = f'#!/bin/sh\nexec {sys.executable} -m gpumon --simulate {gpus} --seed {seed} "$@"\n'
        if not script.exists() or script.read_text() != text:
            script.write_text(text)
            script.chmod(0o755)
        path = f"{bin_dir}{os.pathsep}{path}"
    env = {**os.environ, "PATH": path, "GPUMON_HOME": str(home / "state")}
    proc = subprocess.run(["sh", "-c", command], env=env, stdin=subprocess.DEVNULL, check=False)
    sys.exit(proc.returncode if proc.returncode >= 0 else 255)


if __name__ == "__main__":
    main()
