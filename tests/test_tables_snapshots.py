"""SVG snapshots of the GPUs view's compact mode (c) and a filtered process list (/)."""

from __future__ import annotations

from tests.conftest import make_app


def test_compact_mode_eight_gpus_80x24(snap_compare) -> None:
    assert snap_compare(make_app(gpus=8), press=["c"], terminal_size=(80, 24))


def test_processes_filtered_120x32(snap_compare) -> None:
    assert snap_compare(make_app(gpus=4), press=["a", "slash", *"alice", "enter"], terminal_size=(120, 32))
