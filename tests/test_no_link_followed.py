"""No link in the state dir is followed and no FIFO there is waited on (issue 49 items 1 and 3).

The first test reads gpumon's own code: every call that creates, truncates or appends a file goes through
``core/safefs.py`` (no-follow, no-block, regular files only), and the few that do not say why below. The
second plants a link at every name a real run writes (its files and the temporary names its writers use), to
files outside the state dir, and sees nothing written through and the run's end recorded. The third puts
FIFOs where the supervisor, ``gpumon alerts``, ``logs`` and ``doctor`` read and append.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.alert_receiver import Receiver
from tests.conftest import wait_ended, wait_until

ROOT = Path(__file__).resolve().parents[1]
WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
# (file, the call's first line): why it is not safefs's. Only writes outside the state dir, or of a FIFO gpumon
# makes itself, belong here.
NOT_STATE_FILES = {
    ("gpumon/cli/monitor.py", "os.open(os.devnull, os.O_WRONLY)"): "/dev/null",
    ("gpumon/cli/watching.py", "os.open(os.devnull, os.O_WRONLY)"): "/dev/null",
    ("gpumon/core/runs/supervision/runner.py", 'open(os.devnull, "w")'): "/dev/null",
    ("gpumon/core/runs/supervision/output.py", "os.mkfifo(path, 0o600)"): "mkfifo fails on any name that exists",
    ("gpumon/core/runs/supervision/output.py", "os.open(path, os.O_WRONLY | os.O_CLOEXEC)"): "the FIFO it just made",
    ("gpumon/core/runs/supervision/output.py", "os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)"): (
        "a rank's end of the supervisor's FIFO: O_NOFOLLOW, then S_ISFIFO checked"
    ),
    (
        "gpumon/core/runs/record/index.py",
        "sqlite3.connect(self.path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False)",
    ): "the index: _take_back() removes a link or FIFO at its path first",
    ("gpumon/tui/views/runs/view.py", "self.new_runs.touch()"): "not a file: the Runs view's new-run timer",
    ("gpumon/core/runs/record/cgroup.py", 'open(Path(folder) / "cgroup.procs", "w")'): "a cgroup's file, in /sys",
    ("gpumon/tui/views/runs/view.py", "self.new_runs.touch(event.key)"): "not a file: the Runs view's new-run timer",
}


def _writes(path: Path) -> Iterator[tuple[int, str]]:
    """(line, the call's first line) of each call in ``path`` that may create, truncate or append a file."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func, text = node.func, (ast.get_source_segment(source, node) or "").splitlines()[0]
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        if name == "open" and isinstance(func, ast.Name):
            mode = (
                node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            )
            if mode is not None and not (isinstance(mode, ast.Constant) and not set(str(mode.value)) & set("wax+")):
                yield node.lineno, text
        elif name == "open" and owner == "os" and len(node.args) > 1:
            flags = ast.get_source_segment(source, node.args[1]) or ""
            if any(flag in flags for flag in WRITE_FLAGS) and "O_EXCL" not in flags:  # O_EXCL never follows
                yield node.lineno, text
        elif (name in ("write_text", "write_bytes", "touch") and isinstance(func, ast.Attribute)) or (
            owner in ("os", "sqlite3", "shutil") and name in ("mkfifo", "symlink", "link", "connect", "copy", "move")
        ):
            yield node.lineno, text


def test_every_write_in_gpumons_code_goes_through_safefs() -> None:
    found, seen = [], set()
    for path in sorted((ROOT / "gpumon").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel == "gpumon/core/safefs.py":
            continue
        for line, text in _writes(path):
            key = (rel, text.strip())
            seen.add(key)
            if key not in NOT_STATE_FILES:
                found.append(f"{rel}:{line}: {text.strip()}")
    assert not found, "write these through gpumon/core/safefs.py (or say why not here):\n" + "\n".join(found)
    assert not set(NOT_STATE_FILES) - seen, f"no longer in the code: {set(NOT_STATE_FILES) - seen}"


FAILS_LATER = (
    "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)\n"
    'sys.exit("the shard index is corrupt")\n'
)


class Cli:
    def __init__(self, tmp: Path, receiver: Receiver) -> None:
        self.tmp = tmp
        cfg = tmp / "cfg"
        cfg.mkdir()
        (cfg / "config.toml").write_text(f'[alerts]\nwebhook = "{receiver.url}"\ncommand = ["true"]\n')
        (cfg / "config.toml").chmod(0o600)
        self.env = {**os.environ, "GPUMON_HOME": str(tmp / "home"), "GPUMON_CONFIG_DIR": str(cfg),
                    "CUDA_VISIBLE_DEVICES": ""}  # fmt: skip
        (tmp / "job.py").write_text(FAILS_LATER)

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpumon", *args], env=self.env, capture_output=True, text=True,
                              cwd=self.tmp, timeout=120)  # fmt: skip

    def launch(self, go: Path) -> tuple[str, Path]:
        done = self("launch", "script", "job.py", "--on-alert", "true", "--", str(go))
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.split()[-1]
        return run_id, self.tmp / "home" / "runs" / run_id


def _files(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()}


def test_links_planted_at_every_name_a_run_writes_are_never_written_through(tmp_path: Path) -> None:
    receiver = Receiver().start()
    try:
        cli = Cli(tmp_path, receiver)
        # A first run, to its end: every name a run writes (its files, its events, its alert logs).
        go = tmp_path / "go"
        go.touch()
        first, first_dir = cli.launch(go)
        wait_ended(tmp_path / "home", first)
        assert wait_until(lambda: (first_dir / "alerts.log").exists(), timeout=60)
        names = _files(first_dir)
        assert {"exit.json", "summary.json", "alerts.jsonl", "alerts.log"} <= names, names
        # The second run waits; links go at each name it has not written yet, and at its writers' temporary
        # names (``.NAME.PID.tmp``, pids of its supervisor and runner), to files outside the state dir.
        second, run_dir = cli.launch(tmp_path / "go2")
        status = run_dir / "status.json"
        assert wait_until(lambda: status.exists() and "runner_pid" in json.loads(status.read_text() or "{}"), 60)
        pids = [json.loads(status.read_text())[key] for key in ("supervisor_pid", "runner_pid")]
        outside = tmp_path / "outside"
        outside.mkdir()
        planted = {}
        for name in sorted(names - _files(run_dir)):
            name = name.replace(first, second)
            folder = run_dir / Path(name).parent
            folder.mkdir(parents=True, exist_ok=True)
            for link in [Path(name).name] + [f".{Path(name).name}.{pid}.tmp" for pid in pids]:
                victim = outside / f"{len(planted)}"
                victim.write_text("not gpumon's\n")
                (folder / link).symlink_to(victim)
                planted[folder / link] = victim
        dangling = run_dir / ".status.json.tmp-never"  # a link to nothing: following it would create the file
        (tmp_path / "go2").touch()
        wait_ended(tmp_path / "home", second)
        assert json.loads(status.read_text())["state"] == "failed"  # its end recorded, not lost
        assert wait_until(lambda: len(receiver.arrived) >= 2, timeout=60), "the second run's alert never arrived"
        written = [f"{link} -> {victim}" for link, victim in planted.items() if victim.read_text() != "not gpumon's\n"]
        assert not written, "written through a planted link:\n" + "\n".join(written)
        assert sorted(p.name for p in outside.iterdir()) == sorted(v.name for v in planted.values())
        assert not dangling.exists()
        assert (run_dir / "exit.json").is_file() and not (run_dir / "exit.json").is_symlink()
    finally:
        receiver.stop()


def test_fifos_where_gpumon_reads_and_appends_hold_nobody(tmp_path: Path) -> None:
    receiver = Receiver().start()
    try:
        cli = Cli(tmp_path, receiver)
        run_id, run_dir = cli.launch(tmp_path / "go")
        assert wait_until(lambda: (run_dir / "status.json").exists(), timeout=60)
        os.mkfifo(run_dir / "alerts.jsonl")  # where the supervisor appends the failure's alert
        (tmp_path / "go").touch()
        wait_ended(tmp_path / "home", run_id, timeout=120)  # the end is recorded: nothing held the supervisor
        assert json.loads((run_dir / "status.json").read_text())["state"] == "failed"
        os.unlink(run_dir / "summary.json")
        os.mkfifo(run_dir / "summary.json")  # where logs and the doctor read the run's fold
        for args in (("alerts",), ("logs", run_id), ("doctor", run_id), ("runs", "--json")):
            done = cli(*args)  # each within subprocess's 120 s, or it raises
            assert done.returncode in (0, 1), (args, done.stderr)
            assert "Traceback" not in done.stderr, (args, done.stderr)
    finally:
        receiver.stop()
