"""A run's log replaced while the run is quiet (a link planted, the file deleted): the next output goes to a new
file at the log's path, never through the link nor into the deleted file, however soon after the last write."""

from __future__ import annotations

import stat
import time
from pathlib import Path

from gpumon.core.runs.supervision.output import QUIET_S, CappedLog


def quiet() -> None:
    time.sleep(QUIET_S * 2)  # the run prints nothing for a moment: that pause is the case, not a wait for an event


def test_a_link_planted_during_a_pause_is_removed_before_the_next_line(tmp_path: Path) -> None:
    outside = tmp_path / "precious"
    outside.write_bytes(b"not a log\n")
    outside.chmod(0o644)
    path = tmp_path / "logs" / "rank0.log"
    path.parent.mkdir()
    log = CappedLog(path, 1 << 20)
    log.write(b"before\n")
    path.unlink()
    path.symlink_to(outside)
    quiet()
    log.write(b"after\n")
    log.close()
    assert outside.read_bytes() == b"not a log\n" and stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert path.is_file() and not path.is_symlink()
    text = path.read_text()
    assert text.endswith("after\n") and "before" not in text and "was a link to" in text, text


def test_a_log_deleted_during_a_pause_gets_the_next_line_in_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    log = CappedLog(path, 1 << 20)
    log.write(b"epoch 1\n")
    path.unlink()  # `rm rank0.log` under a live run
    quiet()
    log.write(b"epoch 2\n")
    log.close()
    assert path.read_bytes() == b"epoch 2\n"
