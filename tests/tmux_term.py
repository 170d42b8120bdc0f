"""gpumon in a real terminal: a tmux server of its own per test, its pane read as the user sees it.

The `tmux` fixture (tests/conftest.py) gives one sized by the test's mark: `pytest.mark.tmux(100, 30)`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from tests.conftest import wait_until


class Tmux:
    def __init__(self, width: int = 80, height: int = 24) -> None:
        self.socket = f"gpumon-test-{uuid.uuid4().hex[:8]}"
        self.size = (width, height)

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False).stdout

    def start(self, argv: list[str]) -> None:
        env = {**os.environ, "TERM": "xterm-256color"}
        env.pop("COLORTERM", None)  # as over plain ssh: 256 colours
        subprocess.run(
            [
                "tmux",
                "-L",
                self.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                str(self.size[0]),
                "-y",
                str(self.size[1]),
                *argv,
            ],
            check=True,
            env=env,
        )
        self.run("set-option", "-g", "remain-on-exit", "on")

    def screen(self) -> str:
        return self.run("capture-pane", "-p")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", *keys)

    def wait_for(self, *texts: str, timeout: float = 20.0) -> str:
        found = wait_until(lambda: all(t in (s := self.screen()) for t in texts) and s, timeout=timeout)
        assert found, f"never saw {texts!r} on screen:\n{self.screen()}"
        return found

    def pane_dead(self) -> bool:
        return self.run("display-message", "-p", "#{pane_dead}").strip() == "1"

    def kill(self) -> None:
        self.run("kill-server")


def start_simulated(tmux: Tmux) -> str:
    """gpumon with one simulated GPU, drawn once; the screen."""
    tmux.start([sys.executable, "-m", "gpumon", "--simulate", "1", "--interval", "0.5"])
    return tmux.wait_for("SIMULATED", "processes · GPU 0")
