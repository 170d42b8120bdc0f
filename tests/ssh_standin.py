"""A stand-in for ssh (given as ``--ssh 'python tests/ssh_standin.py'``): every "host" is this machine.

It takes ssh's argv as gpumon builds it (``[options] -- [user@]host 'remote command'``),
drops the options, and runs the remote command here the way a remote shell would
split it (shlex), in a state dir of the host's own: ``$STANDIN_ROOT/<host>`` is
both its home (the working directory) and its ``GPUMON_HOME``. gpumon is this
Python's. Hosts named in ``$STANDIN_DOWN`` answer as an unreachable host does
(ssh's message, exit 255); hosts in ``$STANDIN_BROKEN_LAUNCH`` answer
``gpumon launch`` with an error (a node that fails to start after the others did).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

WITH_VALUE = {"-o", "-p", "-i", "-l", "-J", "-F", "-E", "-c", "-m", "-b", "-S", "-L", "-R", "-D", "-W", "-w"}


def main(argv: list[str]) -> int:
    words = list(argv)
    while words and words[0] != "--" and words[0].startswith("-"):
        words = words[2:] if words[0] in WITH_VALUE else words[1:]
    if words and words[0] == "--":
        words = words[1:]
    if len(words) < 2:
        print("usage: ssh_standin.py [options] -- host 'command'", file=sys.stderr)
        return 255
    host = words[0].rpartition("@")[2]
    command = shlex.split(" ".join(words[1:]))
    if host in os.environ.get("STANDIN_DOWN", "").split(","):
        print(f"ssh: connect to host {host} port 22: Connection refused", file=sys.stderr)
        return 255
    if host in os.environ.get("STANDIN_BROKEN_LAUNCH", "").split(",") and "launch" in command:
        print("gpumon: error: could not start the run: [Errno 28] No space left on device", file=sys.stderr)
        return 2
    home = Path(os.environ["STANDIN_ROOT"], host)
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GPUMON_HOME=str(home / "state"), HOME=str(home))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    os.chdir(home)
    os.execvpe(command[0], command, env)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
