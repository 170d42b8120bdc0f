"""Text that is not ours never reaches the terminal as escapes from the app (issue 49 item 7): a run whose
exception carries OSC 52 (set the viewer's clipboard), a title change and a screen clear, and whose name and
alert carry them too. The app runs in a real pty; every byte it writes is read while the toast shows and each
view is drawn, and no foreign escape is among them; the text shows as ``less`` shows it (``^[]52;``)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from tests.conftest import wait_ended, wait_until

PAYLOAD = "\x1b]52;c;Zm9yZWlnbg==\x07\x1b]0;pwned\x07\x1b[2J"
FOREIGN = (b"\x1b]52;", b"\x1b]0;pwned", b"\x1b]2;pwned", b"Zm9yZWlnbg==\x07")
SCRIPT = f"import sys\nraise RuntimeError({PAYLOAD!r} + ' the shard index is corrupt')\n"


class Terminal:
    """``gpumon ARGS`` on a pty of ``cols`` x ``rows``; everything it writes kept in ``out``."""

    def __init__(self, env: dict[str, str], cwd: Path, *args: str, cols: int = 140, rows: int = 40) -> None:
        self.main, child = pty.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen([sys.executable, "-m", "gpumon", *args], env=env, cwd=cwd, stdin=child,
                                     stdout=child, stderr=child, start_new_session=True)  # fmt: skip
        os.close(child)
        self.out = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.main], [], [], 0.2)
            if not ready:
                if self.proc.poll() is not None:
                    return
                continue
            try:
                data = os.read(self.main, 65536)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.out += data

    def seen(self, text: bytes) -> bool:
        with self.lock:
            return text in self.out

    def press(self, keys: bytes) -> None:
        os.write(self.main, keys)

    def close(self) -> None:
        self.press(b"q")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.main)


def test_foreign_escapes_in_a_runs_words_never_reach_the_terminal(tmp_path: Path) -> None:
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "GPUMON_CONFIG_DIR": str(tmp_path / "cfg"),
           "CUDA_VISIBLE_DEVICES": "", "TERM": "xterm-256color", "COLORTERM": "truecolor"}  # fmt: skip
    (tmp_path / "escapes.py").write_text(SCRIPT)
    term = Terminal(env, tmp_path, "--simulate", "1")
    try:
        assert wait_until(lambda: term.seen(b"GPU"), timeout=60), bytes(term.out[-2000:])
        launched = subprocess.run(
            [sys.executable, "-m", "gpumon", "launch", "script", "escapes.py", "--name", "evil" + PAYLOAD],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert launched.returncode == 0, launched.stderr
        run_id = launched.stdout.split()[-1]
        wait_ended(tmp_path / "home", run_id)
        # the failure's toast comes with no key pressed; then every view that shows the run's words
        assert wait_until(lambda: term.seen(b"shard"), timeout=60), bytes(term.out[-3000:])
        phases = [("the toast", 0)]  # where in the output each phase began: a failure names the view
        for key, title in ((b"r", b"Runs"), (b"!", b"Alerts"), (b"d", b"Doctor"), (b"t", b"Trials"), (b"h", b"Fleet")):
            before = len(term.out)
            phases.append((title.decode(), before))
            term.press(key)
            assert wait_until(lambda t=title, b=before: t in term.out[b:], timeout=30), (key, bytes(term.out[-2000:]))
            time.sleep(0.5)  # a view's later rows (its detail, its log tail) come a frame or two after its title
        assert wait_until(lambda: term.seen(b"^[]52;c;"), timeout=10), "the foreign text was never drawn as text"
    finally:
        term.close()
    out = bytes(term.out)
    found = []
    for foreign in FOREIGN:
        at = out.find(foreign)
        if at >= 0:
            where = [name for name, start in phases if start <= at][-1]
            found.append(f"{foreign!r} in {where}: ...{out[max(0, at - 80) : at + 40]!r}")
    assert not found, "foreign escapes reached the terminal:\n" + "\n".join(found)


def test_another_hosts_words_and_any_table_cell_show_their_escapes_as_text() -> None:
    """The Fleet view and ``gpumon fleet`` draw another host's GPU names, users, commands and reasons; every
    table (Runs, Trials, Alerts, processes) draws cells: a control character there is shown, never obeyed."""
    from rich.text import Text

    from gpumon.core.fleet.hosts import Host
    from gpumon.core.fleet.lines import host_lines
    from gpumon.core.fleet.model import HostState
    from gpumon.tui.widgets.keyed_table import SortCell

    evil = "\x1b]52;c;Zm9yZWlnbg==\x07"
    doc = {
        "devices": [{"index": 0, "name": f"H100{evil}", "state": "ok", "mem_used": 1, "mem_total": 2}],
        "processes": [
            {"gpu_index": 0, "pid": 7, "user": f"eve{evil}", "command": f"python x{evil}.py", "used_memory": 1}
        ],
    }
    lines = host_lines(HostState(Host(f"gpu1{evil}", "gpu1"), "down", reason=f"ssh: {evil}refused", snapshot=doc))
    words = [lines.name, lines.words, lines.gpus[0].name, lines.gpus[0].user, lines.gpus[0].command]
    assert all("\x1b" not in w and "\x07" not in w for w in words if w), words
    assert all("^[]52;" in w for w in words if w), words
    cell = SortCell("k", Text(f"trial_0001{evil}", style="bold"))
    assert (
        "\x1b" not in cell.text.plain and cell.text.plain.startswith("trial_0001^[]52;") and cell.text.style == "bold"
    )
