"""State-dir files opened as files (core/safefs.py): never through a link, never blocking on a FIFO; an atomic
write never takes another writer's temporary file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpumon.core.safefs import NotRegular, open_regular, write_atomic


def test_the_temporary_file_of_another_writer_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    theirs = tmp_path / f".status.json.{os.getpid()}.tmp"
    theirs.write_bytes(b"another thread's write")
    write_atomic(target, b"{}")
    assert target.read_bytes() == b"{}" and theirs.read_bytes() == b"another thread's write"


def test_a_fifo_or_a_link_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "rank0.log"
    os.mkfifo(fifo)
    with pytest.raises(NotRegular, match="is a FIFO"):
        open_regular(fifo)  # read: opened without a writer, refused
    with pytest.raises(NotRegular, match="is a FIFO"):
        open_regular(fifo, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # write: no reader, ENXIO at once
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")  # dangling: O_CREAT would have made the target
    with pytest.raises(NotRegular, match="is a link to"):
        open_regular(link, os.O_WRONLY | os.O_CREAT)
    assert not (tmp_path / "elsewhere").exists()
