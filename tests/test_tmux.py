"""A real terminal: gpumon in tmux, read the pane, press keys, quit."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import requires_tmux, wait_until

pytestmark = [pytest.mark.tmux, requires_tmux]


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


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    t = Tmux()
    try:
        yield t
    finally:
        t.kill()


def test_simulated_monitor_in_a_real_terminal(tmux: Tmux) -> None:
    tmux.start([sys.executable, "-m", "gpumon", "--simulate", "2", "--interval", "0.5"])
    screen = tmux.wait_for("SIMULATED", "GPU 0", "UTIL", "processes · GPU 0", "5000000")
    assert "Traceback" not in screen
    tmux.keys("1")
    tmux.wait_for("processes · GPU 1", "5000010")
    tmux.keys("a")
    tmux.wait_for("processes · all GPUs · 3")
    tmux.keys("?")
    tmux.wait_for("gpumon keys", "quit")
    tmux.keys("End")  # the help scrolls: its last lines are reached
    tmux.wait_for("census")
    tmux.keys("Escape")
    tmux.wait_for("processes · all GPUs")  # the help closed (scrolled, its title is gone too)
    tmux.keys("q")
    assert wait_until(tmux.pane_dead, timeout=10), tmux.screen()
    assert "Traceback" not in tmux.screen()


def test_no_gpu_machine_starts_and_says_why(tmux: Tmux) -> None:
    from gpumon.core.gpu import open_gpu_source

    if open_gpu_source().name != "none":
        pytest.skip("a GPU is visible here")
    tmux.start([sys.executable, "-m", "gpumon"])
    screen = tmux.wait_for("No GPU shown", "NVML library not found", "cores")
    assert "Traceback" not in screen
    tmux.keys("q")
    assert wait_until(tmux.pane_dead, timeout=10)
