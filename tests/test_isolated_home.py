"""No test reads the user's own state, config or cache (issue 50): the README's test command failed for anyone
who had used gpumon, since eight snapshot tests drew the user's own unread alert in their top bar."""

from __future__ import annotations

import os
from pathlib import Path

from gpumon.core.config import config_dir
from gpumon.core.runs.record.store import state_dir


def test_a_test_sees_neither_the_users_state_nor_their_config() -> None:
    home = Path(os.path.expanduser("~"))
    for where in (state_dir(), config_dir()):
        assert not where.is_relative_to(home / ".local") and not where.is_relative_to(home / ".config"), where
    assert state_dir() != Path(os.environ.get("HOME", "/nonexistent"), ".local", "state", "gpumon")


def test_two_tests_never_share_a_state_dir_by_default(tmp_path: Path) -> None:
    (state_dir() / "mine").write_text("this test's")  # the next test's state dir has no such file
    assert os.environ["GPUMON_HOME"] != str(tmp_path)


def test_the_next_test_starts_with_an_empty_state_dir() -> None:
    assert not (state_dir() / "mine").exists()
