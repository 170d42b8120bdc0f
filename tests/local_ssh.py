"""A stand-in for ssh: drops ssh's options, then runs the remote command here with sh, as sshd would there.

Used as ``--ssh '<python> tests/local_ssh.py'``: the argv is ``[options...] -- [user@]host 'command'``.
``FAKE_SSH_EXIT`` and ``FAKE_SSH_STDERR`` make it fail as ssh does (exit 255 and its message).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_SSH_EXIT"):
        print(os.environ.get("FAKE_SSH_STDERR", "ssh: failed"), file=sys.stderr)
        return int(os.environ["FAKE_SSH_EXIT"])
    if "--" not in argv:
        print("local_ssh: expected '-- host command'", file=sys.stderr)
        return 255
    rest = argv[argv.index("--") + 1 :]
    if len(rest) < 2:
        print("local_ssh: no remote command", file=sys.stderr)
        return 255
    os.execvp("sh", ["sh", "-c", " ".join(rest[1:])])  # ssh joins the words with spaces for the remote shell


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
