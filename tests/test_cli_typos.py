"""A user's typo gets one line that says what to do, and exit 2 (issue 35, CLI typos). The real CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

Gpumon = Callable[..., CompletedProcess[str]]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["lanch", "ddp"], "gpumon: error: unknown command 'lanch': did you mean launch? (see 'gpumon --help')"),
        (
            ["runs", "--jsn"],
            "gpumon runs: error: unknown option --jsn: did you mean --json? (see 'gpumon runs --help')",
        ),
        (["logs", "--folow", "x"], "gpumon logs: error: unknown option --folow: did you mean --follow?"),
        (["--simulat", "4"], "gpumon: error: unknown option --simulat: did you mean --simulate?"),
        (["xyzzy"], "gpumon: error: unknown command 'xyzzy' (see 'gpumon --help')"),
        (
            ["launch", "script", "train.py", "--name", ""],
            "gpumon: error: --name is empty: give the run a name, or leave --name out (gpumon names it)",
        ),
        (["launch", "script", "src"], "gpumon: error: src is a folder: give the script in it, e.g. "),
        (  # issue 50: the script's own option, not a mistyped --slots
            ["launch", "script", "train.py", "--steps", "10"],
            "gpumon launch: error: unknown option --steps: a program's own arguments go after '--': "
            "gpumon launch script train.py -- --steps 10",
        ),
        (["launch", "script", "--slot", "2", "train.py"], "gpumon launch: error: unknown option --slot: did you mean"),
        (  # said at once, not "queued" and failed a second later by the keeper
            ["launch", "script", "train.py", "--queue", "--gpus", "64"],
            "gpumon: error: --gpus 64: this host has ",
        ),
    ],
)
def test_a_typo_gets_one_line_that_says_what_to_do(gpumon: Gpumon, tmp_path: Path, args: list[str], line: str) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "src").mkdir()
    done = gpumon(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(line), done.stderr
    assert not (tmp_path / "home" / "runs").exists() or not list((tmp_path / "home" / "runs").iterdir())
